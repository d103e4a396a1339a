#!/usr/bin/env bash
# Builds the test binaries `cargo test` would, then runs them: JOBS of them at a time (default
# 3: most wait on sleeps and real servers rather than the CPU), then the binary that loads both
# cores by design (`chaos`: the chaos scenarios, the explorer) alone, as its throughput floors
# assume. WAITING names (as test name filters) the tests of that binary that mostly wait (for
# failovers, TTLs, one term after another): they run first, in a process of their own (three
# at a time), beside the other binaries; the rest of it runs alone after them.
#
# Each binary runs in its package's folder, as `cargo test` runs it; its output goes to
# target/test-logs/<package>-<target>.log and is printed when it fails. Exits non-zero when any
# binary failed, after all ran. Arguments are passed to cargo (which targets to build); those
# after `--`, to every test binary (test name filters, say).
#
#   scripts/run-tests.sh --workspace --all-features --lib --tests
#   scripts/run-tests.sh --all-features --test line --test mutex -- order:: quorum::
#   WAITING="scenarios::s20_ scenarios::s22_" scripts/run-tests.sh --all-features --test chaos
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${JOBS:-3}
# The binaries (by target name) that take both cores: never beside another binary.
alone=" chaos "

# What goes to cargo, and what (after `--`) to each test binary.
cargo_args=()
while (($#)) && [[ $1 != -- ]]; do
  cargo_args+=("$1")
  shift
done
(($#)) && shift
test_args=("$@")

logs=$root/target/test-logs
rm -rf "$logs"
mkdir -p "$logs"

# One line per test binary (built with the test profile): its path, its package's manifest,
# its kind (lib, bin, test, example) and its name.
artifacts=$logs/artifacts
cargo test --no-run --message-format=json "${cargo_args[@]}" >"$logs/build.json"
grep '"reason":"compiler-artifact"' "$logs/build.json" |
  grep -E '"profile":\{[^}]*"test":true' |
  grep -v '"executable":null' |
  sed -E 's/.*"manifest_path":"([^"]*)".*"target":\{"kind":\["([a-z-]*)"\][^}]*"name":"([^"]*)".*"executable":"([^"]*)".*/\4 \1 \2 \3/' \
    >"$artifacts"

light=()
heavy=()
while read -r exe manifest kind name; do
  dir=$(dirname "$manifest")
  package=$([[ $dir == "$root" ]] && echo quorumlock || basename "$dir")
  entry="$exe|$dir|$package-$kind-$name"
  if [[ $alone == *" $name "* ]]; then heavy+=("$entry"); else light+=("$entry"); fi
done <"$artifacts"

started=$SECONDS

# Runs one binary (an entry of the lists above) and prints one line of verdict: with the test
# arguments given, or with those after the entry (and its label suffixed with the first).
run_one() {
  local exe=${1%%|*} rest=${1#*|}
  local dir=${rest%%|*} label=${rest#*|}
  local args=("${test_args[@]}")
  if (($# > 1)); then
    label+="-$2"
    args=("${@:3}")
  fi
  local t0=$SECONDS verdict=ok
  (cd "$dir" && "$exe" "${args[@]}") >"$logs/$label.log" 2>&1 || verdict=FAILED
  local result
  result=$(grep -h '^test result' "$logs/$label.log" | tail -1 | sed 's/^test result: [A-Za-z]*\. //')
  echo "$verdict $label: ${result:-no result} [$((SECONDS - t0)) s]"
  [[ $verdict == ok ]]
}

read -ra waiting <<<"${WAITING:-}"
((${#test_args[@]} == 0)) || waiting=()
echo "running ${#light[@]} test binaries, $jobs at a time, then ${#heavy[@]} alone" \
  "(their tests that mostly wait, ${#waiting[@]} filters, beside the others)"
# The alone binaries' tests that mostly wait: beside the others, from the start.
slots=$jobs
if ((${#waiting[@]} > 0)); then
  for entry in "${heavy[@]}"; do
    run_one "$entry" waiting --test-threads=3 "${waiting[@]}" &
    slots=$((slots + 1))
  done
fi
for entry in "${light[@]}"; do
  while (($(jobs -rp | wc -l) >= slots)); do
    wait -n || true
  done
  run_one "$entry" &
done
wait || true
skips=()
for filter in "${waiting[@]}"; do
  skips+=(--skip "$filter")
done
for entry in "${heavy[@]}"; do
  if ((${#skips[@]} > 0)); then
    run_one "$entry" loaded "${skips[@]}" || true
  else
    run_one "$entry" || true
  fi
done

failed=$(grep -L '^test result: ok\.' "$logs"/*.log || true)
passed=$(cat "$logs"/*.log | sed -nE 's/^test result: [A-Za-z]*\. ([0-9]+) passed.*/\1/p' |
  awk '{n += $1} END {print n + 0}')
echo "test binaries: $((${#light[@]} + ${#heavy[@]})), tests passed: $passed [$((SECONDS - started)) s]"
if [[ -n $failed ]]; then
  for log in $failed; do
    echo "FAILED $(basename "$log" .log); its output:"
    sed 's/^/    /' "$log"
  done
  exit 1
fi
