#!/usr/bin/env bash
# `make mutants`: every patch in verify/mutants/ puts one known defect back into a scratch copy of
# this tree; the simulation then runs fresh seeds until its first violation, for at most
# MUTANT_SECS (default 120) seconds of wall clock. Prints, per patch, the time to find it and the
# seed that did; a patch not found in time is reported missed, and the run fails. MUTANTS=<glob>
# runs only the patches whose names match (e.g. MUTANTS='owner-*').
#
# `scripts/mutants.sh --explorer` (`make explore-mutants`): the same catalogue against the
# explorer instead (real servers, fresh seeds until the first run within bounds that finds a
# violation), EXPLORE_MUTANT_MINUTES (default 10) minutes at most per patch. Its masters need
# valkey-server and libfaketime, which the Makefile target installs first.
set -u
top=$(git rev-parse --show-toplevel)
engine=simulation
[ "${1:-}" = --explorer ] && engine=explorer
limit=${MUTANT_SECS:-120}
minutes=${EXPLORE_MUTANT_MINUTES:-10}
seconds=${MUTANT_RUN_SECONDS:-10}
target=${CARGO_TARGET_DIR:-$top/target}/mutants
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# One copy of the tree, patched and unpatched in turn: cargo then rebuilds only what a patch
# touched.
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
  if [ "$engine" = explorer ]; then
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
    continue
  fi
  echo "== $name: building (release), then the simulation runs for at most ${limit}s"
  if CARGO_TARGET_DIR="$target" cargo build -q --release -p quorumlock-verify --bin sim \
      --manifest-path "$scratch/Cargo.toml"; then
    out=$("$target/release/sim" --until-violation --limit-secs "$limit" --seconds "$seconds" --quiet)
    echo "$out" | grep -E '^(overlapping|client|worker|seed|FOUND|MISSED)' | head -4
    found=$(echo "$out" | sed -n 's/^FOUND seed=\([^ ]*\) after=\([^ ]*\) runs=\([0-9]*\).*/seed \1 after \2 (\3 runs)/p')
    if [ -n "$found" ]; then
      results+=("$(printf '%-46s found: %s' "$name" "$found")")
    else
      results+=("$(printf '%-46s MISSED within %ss' "$name" "$limit")")
      missed=1
    fi
  else
    results+=("$(printf '%-46s does not build' "$name")")
    missed=1
  fi
  patch -s -R -p1 -d "$scratch" < "$patch"
done
echo
echo "patch                                          time to find in the $engine"
printf '%s\n' "${results[@]}"
exit $missed
