#!/usr/bin/env bash
# The main job: installs what is needed, builds, fetches the Brown corpus (and GPT-2's vocabulary),
# tokenizes it and trains the demo GPT-2 on it for a few minutes, then prints the loss, tokens/s, a
# loss plot and a generated sample.
#   bash scripts/demo.sh [--bytes | --gpt2] [--set section.key=value ...]
# The demo trains on GPT-2 BPE tokens (configs/demo-gpt2.toml) when GPT-2's vocabulary files are
# present in the cache (scripts/fetch_gpt2_vocab.sh, or --gpt2 to fetch them), otherwise on bytes
# (configs/demo.toml). --bytes forces bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
tokenizer=auto
case "${1:-}" in
  --bytes | --gpt2)
    tokenizer=${1#--}
    shift
    ;;
esac
if [ "$tokenizer" = auto ]; then
  tokenizer=bytes
  [ -s "$ODYSSEY_CACHE/gpt2/encoder.json" ] && [ -s "$ODYSSEY_CACHE/gpt2/vocab.bpe" ] && tokenizer=gpt2
fi
bash scripts/setup.sh --with-python || bash scripts/setup.sh
bash scripts/build.sh
bash scripts/fetch_brown.sh
if [ "$tokenizer" = gpt2 ] && ! bash scripts/fetch_gpt2_vocab.sh >/dev/null; then
  echo "demo: GPT-2 vocabulary not available; training on bytes" >&2
  tokenizer=bytes
fi
ODY=${BUILD_DIR:-build}/odyssey
data="$ODYSSEY_CACHE/brown/$tokenizer"
if [ ! -f "$data/train_000000.bin" ]; then
  "$ODY" prepare --input "$ODYSSEY_CACHE"/brown/text/*.txt --output "$data" --tokenizer "$tokenizer" \
    --vocab-dir "$ODYSSEY_CACHE/gpt2"
fi
config=configs/demo.toml
[ "$tokenizer" = gpt2 ] && config=configs/demo-gpt2.toml
rm -rf runs/demo
mkdir -p runs
"$ODY" train --config "$config" --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
  --set "data.vocab_dir=$ODYSSEY_CACHE/gpt2" "$@" | tee runs/demo-result.json
mv runs/demo-result.json runs/demo/result.json
PY=/usr/bin/python3  # Debian's, where python3-matplotlib installs
[ -x "$PY" ] || PY=python3
if "$PY" -c "import matplotlib" 2>/dev/null; then
  "$PY" scripts/plot_metrics.py runs/demo/metrics.jsonl runs/demo/loss.png && echo "plot: runs/demo/loss.png"
fi
echo "--- sample ---"
"$ODY" generate --checkpoint runs/demo --prompt "The jury said" --max-tokens 200 --temperature 0.8 --top-k 40 --seed 7
