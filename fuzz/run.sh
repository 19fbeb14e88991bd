#!/usr/bin/env bash
# Runs every fuzz target built in BUILD (default build-fuzz) for SECONDS each
# (default 10) over a temporary copy of its seed corpus fuzz/corpus/<name>/
# (new inputs libFuzzer finds are not committed). Fails on the first target
# that crashes: the crashing input is left in BUILD/fuzz-artifacts/; turn it
# into a regression test in tests/ that expects minidl::Error.
#   fuzz/run.sh [BUILD] [SECONDS]        e.g. fuzz/run.sh build-fuzz 600
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-10}
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

targets=("$build"/fuzz/fuzz_*)
[ -x "${targets[0]}" ] || { echo "fuzz/run.sh: no fuzz targets in $build/fuzz (run make fuzz)" >&2; exit 1; }
export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
for target in "${targets[@]}"; do
  name=$(basename "$target")
  name=${name#fuzz_}
  corpus="$work/$name"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$name" ] && cp fuzz/corpus/"$name"/* "$corpus"/
  echo "fuzz: $name for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  # -rss_limit_mb: an input that makes a parser allocate more than this is a
  # finding (allocations without bound); so is one input taking 25 s
  # (-timeout, generous because CI machines are loaded).
  # -seed: the same mutations on every run, so CI is red only when the code
  # changed (FUZZ_SEED=0 for a random seed in longer exploratory runs).
  if ! "$target" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$corpus" >"$work/$name.log" 2>&1; then
    tail -n 60 "$work/$name.log"
    echo "fuzz: $name FAILED; the input is in $artifacts/ (make it a regression test in tests/)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$work/$name.log" | tr '\n' ' '
  echo
done
echo "fuzz: all ${#targets[@]} targets ran ${seconds}s each without a crash"
