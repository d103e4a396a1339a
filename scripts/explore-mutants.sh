#!/usr/bin/env bash
# `make explore-mutants`: the catalogue of `make mutants` (verify/mutants/*.patch), each patch
# put into a scratch copy of this tree in turn, against the explorer instead of the simulation:
# real servers, fresh seeds, until the first run within bounds that finds a violation, for at
# most EXPLORE_MUTANT_MINUTES (default 10) minutes. Prints, per patch, the time to find it and
# the seed; a patch not found in time is reported missed (the run fails). MUTANTS=<glob> runs
# only the patches whose names match. The masters need valkey-server and libfaketime, which
# the Makefile target installs first.
set -u
top=$(git rev-parse --show-toplevel)
minutes=${EXPLORE_MUTANT_MINUTES:-10}
target=${CARGO_TARGET_DIR:-$top/target}/mutants
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -C "$top" --exclude=./target --exclude=./.git -cf - . | tar -C "$scratch" -xf -
missed=0
results=()
for patch in "$top"/verify/mutants/${MUTANTS:-*}.patch; do
  name=$(basename "$patch" .patch)
  if ! patch -s -p1 -d "$scratch" < "$patch"; then
    results+=("$(printf '%-46s %s' "$name" 'does not apply')")
    missed=1
    continue
  fi
  echo "== $name: building the explorer (release), then it runs for at most ${minutes} min"
  if CARGO_TARGET_DIR="$target" cargo build -q --release --all-features --example explore \
      --manifest-path "$scratch/Cargo.toml"; then
    out=$("$target/release/examples/explore" --minutes "$minutes" --until-failure --no-shrink)
    runs=$(echo "$out" | grep -c '^=== run ')
    found=$(echo "$out" | sed -n 's/^first defect found after \([0-9]*\)s, seed \(0x[0-9a-f]*\).*/seed \2 after \1 s/p')
    if [ -n "$found" ]; then
      results+=("$(printf '%-46s found: %s (%s runs)' "$name" "$found" "$runs")")
    else
      results+=("$(printf '%-46s MISSED within %s min (%s runs)' "$name" "$minutes" "$runs")")
      missed=1
    fi
  else
    results+=("$(printf '%-46s does not build' "$name")")
    missed=1
  fi
  patch -s -R -p1 -d "$scratch" < "$patch"
done
echo
echo "patch                                          time to find in the explorer"
printf '%s\n' "${results[@]}"
exit $missed
