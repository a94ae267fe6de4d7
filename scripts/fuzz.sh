#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) into ${FUZZ_BUILD_DIR:-build-fuzz} and runs
# each for a time budget, starting from its committed seeds (fuzz/corpus/<target>/, never modified:
# the growing corpus lives in the build directory). Prints the executions per target and the total;
# exits 1 when any target found a crash, leak, timeout or UB (the input is kept as
# <build dir>/artifacts/<target>/crash-*, to become a regression test).
#   bash scripts/fuzz.sh [seconds per target] [targets run at once]      (defaults: 60, 1)
# Needs clang-14 and libclang-rt-14-dev (bash scripts/setup.sh --fuzz) and the GPT-2 vocabulary
# ($ODYSSEY_CACHE/gpt2, scripts/fetch_gpt2_vocab.sh) for fuzz_gpt2_tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
parallel=${2:-1}
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
# Inputs are written to a scratch file per execution: on tmpfs where there is one.
[ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && export TMPDIR=/dev/shm

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 \
  -DODYSSEY_FUZZ=ON -DODYSSEY_BUILD_TESTS=OFF -DODYSSEY_BUILD_BENCH=OFF >/dev/null
targets=()
for src in fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
ninja -C "$BUILD" -j"$(nproc)" "${targets[@]}"
# After the build: nproc honours OMP_NUM_THREADS.
export OMP_NUM_THREADS=1

run_one() {
  local t="$1" name="${1#fuzz_}"
  local corpus="$BUILD/corpus/$name" artifacts="$BUILD/artifacts/$name" log="$BUILD/logs/$name.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb / -malloc_limit_mb: an input that makes
  # a parser allocate gigabytes is a finding, not a slow run.
  "$BUILD/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" "fuzz/corpus/$name" >"$log" 2>&1
}

status=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$parallel" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done

total=0
printf '%-28s %14s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  name="${t#fuzz_}"
  log="$BUILD/logs/$name.log"
  runs=$(grep -o 'stat::number_of_executed_units:[[:space:]]*[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec:[[:space:]]*[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  result=ok
  if ls "$BUILD/artifacts/$name"/* >/dev/null 2>&1 || grep -qE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:' "$log"; then
    result="FOUND: $(ls "$BUILD/artifacts/$name"/* 2>/dev/null | head -n 1) (see $log)"
    status=1
  fi
  total=$((total + ${runs:-0}))
  printf '%-28s %14s %10s  %s\n' "$t" "${runs:-0}" "${rate:-0}" "$result"
done
printf '%-28s %14s\n' total "$total"
exit $status
