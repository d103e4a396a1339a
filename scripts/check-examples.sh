#!/usr/bin/env bash
# Compiles every example as a user who copied it out of this repository would: each in a crate of
# its own, with exactly the dependencies its header lists (the ```toml block after "Copied out of
# this repository"), the paths to quorumlock and its testkit pointed at this checkout. An example
# that uses a crate its header leaves out fails to compile here (E0432), as it would for the user.
# The examples that serve only this repository's own suite (chaos) have no such block and are
# skipped. Offline, with this repository's Cargo.lock: nothing is fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch=$root/target/examples-copied-out
rm -rf "$scratch"
mkdir -p "$scratch"
members=()
for example in examples/*.rs; do
  name=$(basename "$example" .rs)
  deps=$(awk '/^\/\/! Copied out of this repository/{seen=1}
              seen && /^\/\/! ```toml/{inside=1; next}
              inside && /^\/\/! ```/{exit}
              inside{sub(/^\/\/! ?/, ""); print}' "$example")
  if [[ -z $deps ]]; then
    echo "skip $example: no dependencies block in its header"
    continue
  fi
  crate="$scratch/$name"
  mkdir -p "$crate/src"
  cp "$example" "$crate/src/main.rs"
  {
    printf '[package]\nname = "copied-out-%s"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n' \
      "${name//_/-}"
    printf '%s\n' "$deps" |
      sed -e "s|path = \"../quorumlock/testkit\"|path = \"$root/testkit\"|" \
          -e "s|path = \"../quorumlock\"|path = \"$root\"|"
  } > "$crate/Cargo.toml"
  members+=("\"$name\"")
done
(IFS=,; printf '[workspace]\nresolver = "2"\nmembers = [%s]\n' "${members[*]}") > "$scratch/Cargo.toml"
cp Cargo.lock "$scratch/Cargo.lock"
# Each crate on its own, so that one crate's features do not stand in for another's.
for member in "${members[@]}"; do
  name=${member//\"/}
  echo "checking examples/$name.rs as copied out"
  # `cargo check`: a missing dependency fails name resolution, which needs no code generation.
  # The workspace's own target directory: the dependencies checked for its lints are reused.
  CARGO_TARGET_DIR="$root/target" \
    cargo check --offline --quiet --manifest-path "$scratch/Cargo.toml" -p "copied-out-${name//_/-}"
done
echo "every example compiles with the dependencies its header lists (${#members[@]} examples)"
