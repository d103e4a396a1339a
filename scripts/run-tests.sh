#!/usr/bin/env bash
# Builds the test binaries `cargo test` would, then runs them: JOBS of them at a time (default
# 3: most wait on sleeps and real servers rather than the CPU), then the binary that loads both
# cores by design (`chaos`: the chaos scenarios, the explorer) alone, as its throughput floors
# assume (its tests take turns among themselves).
#
# Each binary runs in its package's folder, as `cargo test` runs it; its output goes to
# target/test-logs/<package>-<target>.log and is printed when it fails. Exits non-zero when any
# binary failed, after all ran. Arguments are passed to cargo (which targets to build); those
# after `--`, to every test binary (test name filters, say).
#
#   scripts/run-tests.sh --workspace --all-features --lib --tests
#   scripts/run-tests.sh --all-features --test line --test mutex -- order:: quorum::
#
# A variant: VARIANT_TESTS (names of test targets) run a second time in the same pool, in the
# environment VARIANT_ENV (NAME=value words), with VARIANT_ARGS instead of the arguments after
# `--` (VARIANT_WHOLE: targets run so with no arguments at all), their logs labelled
# VARIANT_LABEL (default "variant"). `make test` runs the core's groups again on Valkey so.
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

# The binaries that take longest (about a minute or more each) start first, so that the pool
# does not end on one of them alone.
long=" line voters commands owner_ids "
variant_tests=" ${VARIANT_TESTS:-} "
variant_whole=" ${VARIANT_WHOLE:-} "
read -r -a variant_env <<<"${VARIANT_ENV:-}"
read -r -a variant_args <<<"${VARIANT_ARGS:-}"

# Each entry: the binary, its folder and its label, `|`-separated; a variant's ends in `|variant`
# (run with VARIANT_ARGS) or `|variant-whole` (with no arguments), in VARIANT_ENV.
light=()
later=()
heavy=()
while read -r exe manifest kind name; do
  dir=$(dirname "$manifest")
  package=$([[ $dir == "$root" ]] && echo quorumlock || basename "$dir")
  entry="$exe|$dir|$package-$kind-$name"
  if [[ $alone == *" $name "* ]]; then
    heavy+=("$entry")
  elif [[ $long == *" $name "* ]]; then
    light+=("$entry")
  else
    later+=("$entry")
  fi
  if [[ $kind == test && $variant_tests == *" $name "* ]]; then
    later+=("$entry-${VARIANT_LABEL:-variant}|variant")
  elif [[ $kind == test && $variant_whole == *" $name "* ]]; then
    later+=("$entry-${VARIANT_LABEL:-variant}|variant-whole")
  fi
done <"$artifacts"
light+=("${later[@]}")

started=$SECONDS

# Runs one binary (an entry of the lists above) and prints one line of verdict: with the test
# arguments given, or with those after the entry (its label suffixed with the first of them).
run_one() {
  local exe=${1%%|*} rest=${1#*|}
  local dir=${rest%%|*} label=${rest#*|}
  local args=("${test_args[@]}") env=()
  case $label in
    *"|variant") args=("${variant_args[@]}") ;;
    *"|variant-whole") args=() ;;
  esac
  if [[ $label == *"|variant"* ]]; then
    label=${label%|variant*}
    env=("${variant_env[@]}")
  fi
  if (($# > 1)); then
    label+="-$2"
    args=("${@:3}")
  fi
  local t0=$SECONDS verdict=ok
  (cd "$dir" && env "${env[@]}" "$exe" "${args[@]}") >"$logs/$label.log" 2>&1 || verdict=FAILED
  local result
  result=$(grep -h '^test result' "$logs/$label.log" | tail -1 | sed 's/^test result: [A-Za-z]*\. //')
  echo "$verdict $label: ${result:-no result} [$((SECONDS - t0)) s]"
  [[ $verdict == ok ]]
}

echo "running ${#light[@]} test binaries, $jobs at a time, then ${#heavy[@]} alone"
for entry in "${light[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do
    wait -n || true
  done
  run_one "$entry" &
done
wait || true
# Three tests at a time: they take turns by the load each puts on the machine
# (tests/chaos/turns.rs), so that the ones that mostly wait run beside the others.
for entry in "${heavy[@]}"; do
  run_one "$entry" alone --test-threads=3 "${test_args[@]}" || true
done

failed=$(grep -L '^test result: ok\.' "$logs"/*.log || true)
passed=$(cat "$logs"/*.log | sed -nE 's/^test result: [A-Za-z]*\. ([0-9]+) passed.*/\1/p' |
  awk '{n += $1} END {print n + 0}')
echo "test runs: $((${#light[@]} + ${#heavy[@]})), tests passed: $passed [$((SECONDS - started)) s]"
if [[ -n $failed ]]; then
  for log in $failed; do
    echo "FAILED $(basename "$log" .log); its output:"
    sed 's/^/    /' "$log"
  done
  exit 1
fi
