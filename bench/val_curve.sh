#!/usr/bin/env bash
# The validation-loss curves of fp32 ZeRO-1, SDP4Bit (qWD + TLq-HS, grad_pipeline 8) and ZeRO++ (int4
# qwZ + hpZ + qgZ) over STEPS steps (default 150) of bench/multinode.sh's model, 4 ranks on this host
# with two emulated nodes (parallel.ranks_per_node = 2): the arithmetic is the one across hosts (the
# multihost.layouts test shows it bitwise), without the link. Validation every EVERY (25) steps on
# EVAL_ROWS (64) rows. Whether the quantized layouts' gap to fp32 closes or grows with training.
#
#   bash bench/val_curve.sh        # STEPS=150 EVERY=25 EVAL_ROWS=64
#
# One JSON line per layout to stdout and to bench/results/val_curve/<date>_<commit>.jsonl: the
# (step, val_loss) curve, the final gap to fp32 in percent, the command, CPU, commit, date and load.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
BIN=${BIN:-$ROOT/build/odyssey}
STEPS=${STEPS:-150}
EVERY=${EVERY:-25}
EVAL_ROWS=${EVAL_ROWS:-64}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
set -a
. "$ROOT/tests/mpi_launch.env"
set +a
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
OUT_DIR="$ROOT/bench/results/val_curve"
mkdir -p "$OUT_DIR"
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
OUT="$OUT_DIR/$(date -u +%Y%m%d_%H%M)_$COMMIT.jsonl"
export HOST_JSON=$("$BIN" info) COMMIT DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)

"$BIN" prepare --input "$ROOT"/cache/brown/text/*.txt --output "$WORK/shards" --tokenizer bytes \
  --val-fraction 0.05 --quiet >/dev/null || { echo "val_curve: cannot prepare cache/brown/text" >&2 && exit 1; }
cfg="$WORK/model.toml"
cat >"$cfg" <<TOML
[model]
arch = "gpt2"
n_layer = 4
n_head = 4
d_model = 256
seq_len = 64
vocab_size = 8192
[data]
train = "$WORK/shards/train_*.bin"
val = "$WORK/shards/val_*.bin"
[train]
gemm_gflops = 50
global_batch = 4
micro_batch = 1
lr = 1e-3
warmup_steps = 2
eval_rows = $EVAL_ROWS
eval_every = $EVERY
threads = 1
seed = 1337
TOML

declare -A ARGS=(
  [fp32_zero1]="--set parallel.zero_stage=1"
  [sdp4bit]="--set parallel.zero_stage=1 --set comm.weights=qwd --set comm.grads=tlq_hs --set comm.grad_pipeline=8"
  [zeropp]="--set parallel.zero_stage=3 --set comm.weights=int4 --set comm.grads=qgz --set comm.hpz=true"
)
for layout in fp32_zero1 sdp4bit zeropp; do
  read -ra args <<<"${ARGS[$layout]}"
  dir="$WORK/$layout"
  cmd=(mpirun --oversubscribe -np 4 "$BIN" train --config "$cfg" --set "checkpoint.dir=$dir" --set train.steps="$STEPS"
    --set parallel.ranks_per_node=2 "${args[@]}")
  timeout 3000 "${cmd[@]}" >"$dir.log" 2>&1 || { echo "val_curve: $layout failed: $(tail -n 2 "$dir.log")" >&2 && continue; }
  python3 - "$dir/metrics.jsonl" "$layout" "${cmd[@]}" <<'PY' | tee -a "$OUT"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l and '"step"' in l]
host = json.loads(os.environ["HOST_JSON"])
print(json.dumps({"layout": sys.argv[2], "curve": [[r["step"], round(r["val_loss"], 5)] for r in rows],
                  "command": " ".join(sys.argv[3:]), "cpu": host.get("cpu", host.get("cpu_model")),
                  "commit": os.environ["COMMIT"], "date": os.environ["DATE"], "load_average": os.getloadavg()[0]}))
PY
done
# The gap of each layout to fp32 at every validation step.
python3 - "$OUT" <<'PY'
import json, sys
runs = {r["layout"]: dict(r["curve"]) for r in map(json.loads, open(sys.argv[1]))}
base = runs.get("fp32_zero1", {})
for layout, curve in runs.items():
    if layout == "fp32_zero1": continue
    gaps = [f"{s}: {100 * (v / base[s] - 1):+.2f}%" for s, v in sorted(curve.items()) if s in base]
    print(f"{layout} against fp32: " + ", ".join(gaps))
PY
echo "val_curve: results in $OUT" >&2
