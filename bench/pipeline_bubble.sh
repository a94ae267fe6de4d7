#!/usr/bin/env bash
# The pipeline's measured bubble against the formulas (tensor-pipeline-parallelism.md §3.8).
#
#   bench/pipeline_bubble.sh            # from the repository root, build/odyssey already built
#
# A GPT-2-shaped model (8 layers, d_model 256, 8 heads, byte vocabulary, 128 tokens per row, one row
# per micro-batch, the layers split equally over the P v stages) trained for STEPS steps (default 4; the first is not counted) at P = parallel.pp
# ranks (default 2: one core per rank on this 2-core machine; P = 4 oversubscribes the cores, so its
# ranks also wait for a core) under GPipe, 1F1B, interleaved (v = 2) and ZB-H1 (zb1) with m = 4, 8
# and 16 micro-batches per step. Per run, from metrics.jsonl (train/trainer.cpp, "pipeline"): the
# bubble fraction 1 - (compute time summed over the ranks) / (P x the longest schedule run), mean over
# the counted steps; the formula (P-1)/(m+P-1), or (P-1)/(v m+P-1) interleaved, or for zb1 the spec's
# (P-1)(t_F+t_I-t_W) / (m (t_F+t_I+t_W) + (P-1)(t_F+t_I-t_W)) with the measured mean action times
# (bubble_formula) and with unit times (bubble_formula_unit: (P-1)/(3m+P-1)); the action table's own
# idle fraction in the unit-time simulation (bubble_unit_cost: t_F = 1, t_B = 2 = t_I + t_W; load-
# independent); the mean compute time per action kind; the peak in-flight micro-batch stages and
# activation bytes per rank against the formula (GPipe m; 1F1B P - r; interleaved its warm-up + 1 =
# (P-r-1) 2 + (v-1) P + 1 chunks, for rank 0 P + (P-1)/v whole stages; zb1 min(P, m) on every rank,
# counted until W: its activation bytes include the deferred weight GEMMs' operands); and the load
# average before and after the run (the machine is shared: the measured bubble includes waiting for a
# core). One JSON line per run, with the CPU and oneDNN ISA (odyssey info).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/odyssey}
P=${P:-2}
STEPS=${STEPS:-4}
MS=${MS:-"4 8 16"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/text"
for i in 1 2 3 4; do
  for j in $(seq 1 400); do echo "Document $i line $j: the quick brown fox jumps over the lazy dog."; done >"$WORK/text/doc$i.txt"
done
"$BIN" prepare --input "$WORK"/text/*.txt --output "$WORK/shards" --tokenizer bytes --quiet >/dev/null
cat >"$WORK/model.toml" <<TOML
[model]
arch = "gpt2"
n_layer = 8
n_head = 8
d_model = 256
seq_len = 128
vocab_size = 256
[data]
train = "$WORK/shards/train_*.bin"
[train]
steps = $STEPS
micro_batch = 1
lr = 1e-3
threads = 1
[memory]
checkpoint = "none"
TOML
export HOST_JSON=$("$BIN" info)
SCHEDULES=${SCHEDULES:-"gpipe 1f1b interleaved zb1"}
for schedule in $SCHEDULES; do
  for m in $MS; do
    v=1
    [ $schedule = interleaved ] && v=2
    dir="$WORK/run_${schedule}_$m"
    # Equal layers per stage (the byte vocabulary makes the embeddings and head cheap), so the bubble is
    # the schedule's, not an imbalance's.
    load_before=$(cut -d' ' -f1-3 /proc/loadavg)
    split=$(python3 -c "print(','.join(['$((8 / (P * v)))'] * $((P * v))))")
    mpirun -np "$P" --oversubscribe "$BIN" train --config "$WORK/model.toml" --set "checkpoint.dir=$dir" \
      --set parallel.pp="$P" --set parallel.pp_schedule=$schedule --set parallel.pp_virtual=$v \
      --set "parallel.pp_layers=$split" \
      --set train.global_batch="$m" >"$dir.log" 2>&1 || { echo "{\"schedule\":\"$schedule\",\"m\":$m,\"error\":\"$(tail -n 1 "$dir.log")\"}"; continue; }
    LOAD_BEFORE=$load_before LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg) \
      python3 - "$dir/metrics.jsonl" "$schedule" "$P" "$v" "$m" <<'PY'
import json, os, sys
path, schedule, P, v, m = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rows = [json.loads(l) for l in open(path)][1:]  # the first step warms up
pipe = [r["pipeline"] for r in rows]
bubble = sum(p["bubble_fraction"] for p in pipe) / len(pipe)
# Mean compute time of one action of each kind (per micro-batch stage), over ranks and steps.
per = {k: sum(sum(a[k] for a in p["action_ms"]) for p in pipe) / (len(pipe) * P * m * v) for k in "FBIW"}
if schedule == "zb1":
    idle = (P - 1) * (per["F"] + per["I"] - per["W"])
    formula = idle / (m * (per["F"] + per["I"] + per["W"]) + idle)
else:
    formula = (P - 1) / (v * m + P - 1)
in_flight = pipe[-1]["peak_in_flight"]
# In stage units of this schedule (interleaved: chunks of 1/v of a rank's layers): its warm-up + 1.
want = ([m] * P if schedule == "gpipe" else [min(P - r, m) for r in range(P)] if schedule == "1f1b" else
        [min(P, m)] * P if schedule == "zb1" else
        [min((P - r - 1) * 2 + (v - 1) * P + 1, m * v) for r in range(P)])
host = json.loads(os.environ["HOST_JSON"])
print(json.dumps({"schedule": schedule, "P": P, "v": v, "m": m, "bubble_measured": round(bubble, 4),
                  "bubble_formula": round(formula, 4),
                  "bubble_formula_unit": round((P - 1) / (3 * m + P - 1), 4) if schedule == "zb1" else None,
                  "bubble_unit_cost": round(pipe[-1]["bubble_unit_cost"], 4),
                  "action_ms": {k: round(t, 2) for k, t in per.items() if t > 0},
                  "wait_ms_per_rank": [round(sum(p["wait_ms"][r] for p in pipe) / len(pipe), 1) for r in range(P)],
                  "step_ms": round(sum(r["step_ms"] for r in rows) / len(rows), 1),
                  "peak_in_flight": in_flight, "peak_in_flight_formula": want,
                  "activation_mb_per_rank": [round(b / 1e6, 2) for b in pipe[-1]["activation_bytes"]],
                  "load_avg_before": os.environ["LOAD_BEFORE"], "load_avg_after": os.environ["LOAD_AFTER"],
                  "cpu": host.get("cpu", host.get("cpu_model")), "isa": host.get("onednn_isa", host.get("isa"))}))
PY
  done
done
