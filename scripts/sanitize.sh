#!/usr/bin/env bash
# The sanitizer pass of the test suite: builds the unit and multi-rank tests with AddressSanitizer +
# UndefinedBehaviorSanitizer into ${SANITIZE_BUILD_DIR:-build-asan} (-O1: half the compile time of -O3,
# and the sanitizers see the same code; no benchmarks) and runs
# them, every unit test and every mpirun test at 1, 2 and 4 ranks (the command-line tests, which
# rerun the same code end to end and dominate the suite's time, are left to the Release pass).
# Any ASan report, UBSan report (-fno-sanitize-recover: the first one fails the test) or leak fails
# the test; leaks inside Open MPI's own libraries are suppressed by scripts/sanitizers/lsan.supp.
#   bash scripts/sanitize.sh [ctest args, e.g. -R Safetensors]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SANITIZE_BUILD_DIR:-build-asan}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g0" -DODYSSEY_SANITIZE=ON \
  -DODYSSEY_BUILD_TESTS=ON -DODYSSEY_BUILD_BENCH=OFF >/dev/null
ninja -C "$BUILD" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export LSAN_OPTIONS="suppressions=$PWD/scripts/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" --timeout 900 -E '^cli\.' "$@"
