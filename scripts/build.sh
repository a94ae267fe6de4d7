#!/usr/bin/env bash
# Configures and builds Odyssey into ${BUILD_DIR:-build} (Release).
#   bash scripts/build.sh [cmake args]         everything: the binary, the tests, the benchmarks
#   bash scripts/build.sh --app [cmake args]   only the odyssey binary (what the demo runs)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# Both modes set the options explicitly: CMake caches them, so a build directory configured by one
# mode would otherwise keep its choice under the other.
options=(-DODYSSEY_BUILD_TESTS=ON -DODYSSEY_BUILD_BENCH=ON)
targets=()
if [ "${1:-}" = --app ]; then
  shift
  options=(-DODYSSEY_BUILD_TESTS=OFF -DODYSSEY_BUILD_BENCH=OFF)
  targets=(odyssey_cli)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${options[@]}" "$@" >/dev/null
ninja -C "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
