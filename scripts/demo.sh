#!/usr/bin/env bash
# The main job: installs what is needed, builds, fetches the Brown corpus, tokenizes it and trains the
# demo GPT-2 on it for a few minutes, then prints the loss, tokens/s, a plot and a generated sample.
#   bash scripts/demo.sh [--set section.key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
bash scripts/build.sh
bash scripts/fetch_brown.sh
ODY=${BUILD_DIR:-build}/odyssey
if [ ! -f "$ODYSSEY_CACHE/brown/bytes/train_000000.bin" ]; then
  "$ODY" prepare --input "$ODYSSEY_CACHE"/brown/text/*.txt --output "$ODYSSEY_CACHE/brown/bytes" --tokenizer bytes
fi
rm -rf runs/demo
"$ODY" train --config configs/demo.toml --set "data.train=$ODYSSEY_CACHE/brown/bytes/train_*.bin" \
  --set "data.val=$ODYSSEY_CACHE/brown/bytes/val_*.bin" "$@" | tee runs-demo-result.json
mv runs-demo-result.json runs/demo/result.json
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 scripts/plot_metrics.py runs/demo/metrics.jsonl runs/demo/loss.png && echo "plot: runs/demo/loss.png"
fi
echo "--- sample ---"
"$ODY" generate --checkpoint runs/demo --prompt "The jury said" --max-tokens 300 --temperature 0.8 --top-k 40 --seed 7
