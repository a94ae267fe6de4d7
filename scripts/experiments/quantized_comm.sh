#!/usr/bin/env bash
# The SDP4Bit / ZeRO++ comparison of issue 6 (an experiment, not a CI test): the same small byte-level
# GPT-2 on the Brown corpus, same seed and data, 4 ranks as 2 emulated nodes x 2, under each
# communication scheme; writes a table (runs/quantized_comm/table.md) and a plot of validation loss
# against step (runs/quantized_comm/val_loss.png).
#   bash scripts/experiments/quantized_comm.sh [--set section.key=value ...]
# The model is configs/brown-bytes.toml narrowed to d_model 128 and context 128 (0.84M parameters) so the
# seven runs take about 16 minutes on 2 cores; --set overrides anything.
# Environment: BUILD_DIR (default build), STEPS (default 200), EVAL_EVERY (default 20), OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
ODY=${BUILD_DIR:-build}/odyssey
OUT=${OUT:-runs/quantized_comm}
STEPS=${STEPS:-200}
EVAL_EVERY=${EVAL_EVERY:-20}
data=${ODYSSEY_CACHE:-cache}/brown/bytes
[ -f "$data/train_000000.bin" ] || {
  echo "quantized_comm: no token shards in $data (run scripts/fetch_brown.sh and '$ODY prepare')" >&2
  exit 1
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# name | zero stage | comm.weights | comm.grads  (the paper's Table 1 columns, plus ZeRO++ as DeepSpeed ships it)
runs=(
  "baseline 1 none none"
  "qW_int4 1 int4 none"
  "qWD 1 qwd none"
  "TLq 1 none tlq"
  "TLq-HS 1 none tlq_hs"
  "SDP4Bit 1 qwd tlq_hs"
  "ZeRO++ 3 int8 qgz"
)
mkdir -p "$OUT"
for r in "${runs[@]}"; do
  read -r name stage weights grads <<<"$r"
  dir="$OUT/$name"
  rm -rf "$dir"
  echo "== $name (zero $stage, comm.weights=$weights, comm.grads=$grads)"
  mpirun -np 4 --oversubscribe "$ODY" train --config configs/brown-bytes.toml \
    --set "data.train=$data/train_*.bin" --set "data.val=$data/val_*.bin" \
    --set model.d_model=128 --set model.seq_len=128 \
    --set train.steps="$STEPS" --set train.micro_batch=4 --set train.eval_every="$EVAL_EVERY" \
    --set train.warmup_steps=$((STEPS / 10)) \
    --set parallel.ranks_per_node=2 --set parallel.zero_stage="$stage" \
    --set comm.weights="$weights" --set comm.grads="$grads" \
    --set checkpoint.dir="$dir" --set checkpoint.every=0 "$@" >"$dir.log" 2>&1 || {
    echo "   failed: see $dir.log" >&2
    exit 1
  }
done
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
"$PY" scripts/experiments/compare_runs.py "$OUT" baseline qW_int4 qWD TLq TLq-HS SDP4Bit ZeRO++
