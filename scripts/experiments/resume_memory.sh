#!/usr/bin/env bash
# Peak memory per rank when GPT-2 124M starts and resumes at dp 4, ZeRO-3 (issue 12: sharding must save
# memory at the moment a large model loads, not only during training). Runs one step from scratch
# (writing a checkpoint), then resumes it for one more step, and prints per phase the largest rank's
# peak RSS and the accounted per-rank state and activations from metrics.jsonl, as JSON.
# Needs the GPT-2 shards of the Brown corpus (scripts/fetch_brown.sh, fetch_gpt2_vocab.sh, and
# `odyssey prepare --tokenizer gpt2`, as the README's Data section says). Env: ODYSSEY, T (256).
set -euo pipefail
cd "$(dirname "$0")/../.."
ODYSSEY=${ODYSSEY:-$PWD/build/odyssey}
T=${T:-256}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
args=(--config configs/gpt2-124m.toml --set train.global_batch=4 --set train.micro_batch=1
  --set train.seq_len="$T" --set parallel.zero_stage=3 --set train.eval_every=0 --set data.val=
  --set "checkpoint.dir=$WORK/run" --set train.threads=1)
mpirun -np 4 --oversubscribe "$ODYSSEY" train "${args[@]}" --set train.steps=1 >"$WORK/start.log" 2>&1
mpirun -np 4 --oversubscribe "$ODYSSEY" train "${args[@]}" --set train.steps=2 --set checkpoint.resume=true \
  >"$WORK/resume.log" 2>&1
python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mb = lambda b: round(b / 1e6, 1)
out = {}
for name, r in zip(("start", "resume"), rows):
    m = r["memory"]
    out[name] = {"peak_rss_mb_max_rank": mb(r["peak_rss_bytes_max"]),
                 "state_mb_per_rank": mb(m["params"] + m["grads"] + m["optimizer"]),
                 "activations_mb": mb(m["activations"]), "comm_buffers_mb": mb(m["comm_buffers"])}
print(json.dumps(out))
PY
