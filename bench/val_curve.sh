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
. bench/common.sh
STEPS=${STEPS:-150}
EVERY=${EVERY:-25}
EVAL_ROWS=${EVAL_ROWS:-64}
bench_init val_curve
trap 'rm -rf "$WORK"' EXIT
bench_prepare_bytes || exit 1
cfg="$WORK/model.toml"
bench_model_toml "$cfg" 64 4 "$EVAL_ROWS" "$EVERY"

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
