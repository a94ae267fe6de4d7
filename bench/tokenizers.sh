#!/usr/bin/env bash
# Odyssey's BPE tokenizers against tiktoken's npm package, measured in the same run on the Brown
# corpus: encode MB/s (one thread, cold caches, and two threads) and the token counts, which must
# agree. Prints one JSON object per tokenizer. Needs the files (scripts/fetch_tokenizer.sh), node, npm.
#   BUILD_DIR=build bash bench/tokenizers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
build=${BUILD_DIR:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent tiktoken@1.0.22 >/dev/null 2>&1 && tar -xzf tiktoken-1.0.22.tgz)
for name in cl100k_base o200k_base; do
  ours=$("$build/bench/bench_tokenizer" "$name" "$ODYSSEY_CACHE/brown/text" 3)
  theirs=$(node bench/tiktoken_speed.js "$work/package" "$name" "$ODYSSEY_CACHE/brown/text")
  python3 - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(json.dumps({"tokenizer": ours["tokenizer"], "host": ours["host"], "tokens": ours["tokens"],
                  "tiktoken_tokens": theirs["tokens"], "same_token_count": ours["tokens"] == theirs["tokens"],
                  "odyssey_mb_s_1_thread": ours["encode_mb_s_cold"]["1"], "odyssey_mb_s_2_threads": ours["encode_mb_s_cold"]["2"],
                  "tiktoken_mb_s": theirs["encode_mb_s"],
                  "ratio_1_thread": round(ours["encode_mb_s_cold"]["1"] / theirs["encode_mb_s"], 2)}))
PY
done
