#!/usr/bin/env bash
# Tensor parallelism at tp 1, 2 and 4 (tensor-pipeline-parallelism.md §1, §9): GPT-2 124M and the
# 124M-class Llama (configs/llama-124m.toml: GQA, 4 key/value heads) on the Brown corpus.
#
#   bench/tp_scaling.sh            # from the repository root, build/odyssey built, cache/brown/gpt2 prepared
#
# Each run trains STEPS steps (default 4; the first is not counted) of global_batch 2, micro_batch 1,
# SEQ tokens per row (default 256), Megatron sequence parallelism on (TP_SP=false: off), one thread
# per rank (tp 4 oversubscribes this 2-core machine: its step time includes waiting for a core). One
# JSON line per run, from metrics.jsonl: step time, tokens/s, the weights, gradients and optimizer
# state per rank (falling as 1/tp, but for the replicated norms and biases), the bytes each rank moved
# per step by group (tp: the TP collectives; the byte count follows spec §1.10), and peak RSS; with the
# CPU and the ISA oneDNN dispatched to (odyssey info).
#
# Domino (parallel.tp_overlap = domino, spec §2): at tp > 1 every run is repeated with Domino on
# (OVERLAPS="none domino", the default), the two halves of each micro-batch's one row being its tokens
# (domino_split = tokens); the JSON line adds tp_hidden_fraction (the median over the counted steps
# of 1 - the time the compute waited for Domino's reductions / the time they took on the communication
# thread) and the milliseconds behind it.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/odyssey}
STEPS=${STEPS:-4}
SEQ=${SEQ:-256}
TPS=${TPS:-"1 2 4"}
TP_SP=${TP_SP:-true}
OVERLAPS=${OVERLAPS:-"none domino"}
REPS=${REPS:-1}  # rounds of every run, one after the other (a shared host's load drifts)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export HOST_JSON=$("$BIN" info)
for rep in $(seq "$REPS"); do
for config in gpt2-124m llama-124m; do
  for tp in $TPS; do
    for overlap in $OVERLAPS; do
      [ "$tp" = 1 ] && [ "$overlap" != none ] && continue
      dir="$WORK/${config}_tp${tp}_${overlap}_$rep"
      mpirun -np "$tp" --oversubscribe "$BIN" train --config "configs/$config.toml" --set "checkpoint.dir=$dir" \
        --set parallel.tp="$tp" --set parallel.tp_sp="$TP_SP" --set train.steps="$STEPS" --set model.seq_len="$SEQ" \
        --set train.global_batch=2 --set train.micro_batch=1 --set train.threads=1 --set train.eval_every=0 \
        --set parallel.tp_overlap="$overlap" --set parallel.domino_split=tokens \
        --set data.val= --set log.every=1 >"$dir.log" 2>&1 ||
        { echo "{\"config\":\"$config\",\"tp\":$tp,\"tp_overlap\":\"$overlap\",\"error\":\"$(tail -n 1 "$dir.log")\"}"; continue; }
      REP=$rep python3 - "$dir/metrics.jsonl" "$config" "$tp" "$TP_SP" "$overlap" <<'PY'
import json, os, statistics, sys
path, config, tp, sp, overlap = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "true", sys.argv[5]
rows = [json.loads(l) for l in open(path) if '"step_ms"' in l][1:]  # the first step warms up
last = rows[-1]
groups = {g: v["bytes"] for g, v in last["comm"].get("by_group", {}).items()}
host = json.loads(os.environ["HOST_JSON"])
out = {"config": config, "tp": tp, "rep": int(os.environ["REP"]), "tp_sp": sp, "tp_overlap": overlap,
       "step_ms": round(statistics.median(r["step_ms"] for r in rows), 1),
       "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rows), 1),
       "params_mb_per_rank": round(last["memory"]["params"] / 1e6, 2),
       "grads_mb_per_rank": round(last["memory"]["grads"] / 1e6, 2),
       "optimizer_mb_per_rank": round(last["memory"]["optimizer"] / 1e6, 2),
       "bytes_per_rank_by_group": groups,
       "peak_rss_mb": round(last["peak_rss_bytes_max"] / 1e6, 1),
       "loss": round(last["loss"], 4),
       "cpu": host.get("cpu", host.get("cpu_model")), "isa": host.get("onednn_isa", host.get("isa"))}
if "tp_hidden_fraction" in last:
    out["tp_hidden_fraction"] = round(statistics.median(r["tp_hidden_fraction"] for r in rows), 3)
    out["tp_reduction_ms"] = round(statistics.median(r["tp_overlap"]["comm_ms"] for r in rows), 1)
    out["tp_wait_ms"] = round(statistics.median(r["tp_overlap"]["wait_ms"] for r in rows), 1)
print(json.dumps(out))
PY
    done
  done
done
done
