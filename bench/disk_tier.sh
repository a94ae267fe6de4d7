#!/usr/bin/env bash
# The step-time cost of the disk tier (memory.tier = disk) against the RAM tier, same policy and chunks.
#
#   bench/disk_tier.sh            # from the repository root, build/odyssey already built
#
# Model: 4 layers, 4 heads, d_model 256, byte vocabulary, one row of T tokens (T=8192 by default),
# memory.checkpoint = full (POLICY), default chunks. Runs go ram, disk, disk, ram, ram, disk ... (REPS
# pairs, default 2) so that load from other processes on the host hits both alike; each run trains STEPS
# (default 3) steps; the steps after the first are measured (their mean). Per run, one JSON line: the
# tier, step_ms, and for the disk tier a step's bytes written and read and the I/O stall (the time the
# compute waited for the I/O thread, from the metrics). Last line: the median step of each tier, their ratio and the median
# stall as a fraction of the disk step (host: CPU model, oneDNN ISA, threads).
#
# Environment: T, REPS, STEPS, POLICY, OFFLOAD (a directory on a local disk, default /var/tmp),
# DATA (byte-token shards; default: prepared from cache/brown/text into $OFFLOAD).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/odyssey}
T=${T:-8192}
REPS=${REPS:-2}
STEPS=${STEPS:-3}
POLICY=${POLICY:-full}
OFFLOAD=${OFFLOAD:-/var/tmp}
WORK=$(mktemp -d "$OFFLOAD/disk_tier_bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
DATA=${DATA:-}
if [ -z "$DATA" ]; then
  "$BIN" prepare --input cache/brown/text/*.txt --output "$WORK/bytes" --tokenizer bytes --val-fraction 0.05 \
    --quiet >/dev/null
  DATA="$WORK/bytes/train_000000.bin"
fi
mkdir -p "$WORK/offload"
HOST_JSON=$("$BIN" info)
export HOST_JSON
: >"$WORK/runs.jsonl"
for rep in $(seq 1 "$REPS"); do
  order="ram disk"
  [ $((rep % 2)) = 0 ] && order="disk ram"  # ABBA: a load that drifts during the runs hits both alike
  for tier in $order; do
    rm -rf "$WORK/run"
    "$BIN" train --config configs/tiny.toml --set model.n_layer=4 --set model.n_head=4 --set model.d_model=256 \
      --set model.vocab_size=256 --set model.seq_len="$T" --set "data.train=$DATA" --set data.val= \
      --set train.steps="$STEPS" --set train.global_batch=1 --set train.micro_batch=1 \
      --set memory.checkpoint="$POLICY" --set memory.tier=$tier --set "memory.offload_dir=$WORK/offload" \
      --set "checkpoint.dir=$WORK/run" >"$WORK/log" 2>&1 || {
      tail -n 3 "$WORK/log" >&2
      exit 1
    }
    python3 - "$WORK/run/metrics.jsonl" "$tier" "$T" "$rep" <<'EOF' | tee -a "$WORK/runs.jsonl"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
steps = steps[1:] or steps  # the first step pays one-time costs (page faults, file preallocation)
mean = lambda xs: sum(xs) / len(xs)
row = {"tier": sys.argv[2], "T": int(sys.argv[3]), "rep": int(sys.argv[4]),
       "step_ms": mean([s["step_ms"] for s in steps])}
if "offload" in steps[-1]:
    row.update({"bytes_written": steps[-1]["offload"]["bytes_written"],
                "bytes_read": steps[-1]["offload"]["bytes_read"],
                "stall_s": mean([s["offload"]["stall_s"] for s in steps])})
print(json.dumps(row))
EOF
  done
done
python3 - "$WORK/runs.jsonl" "$POLICY" <<'EOF'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ram = statistics.median(r["step_ms"] for r in rows if r["tier"] == "ram")
disk = statistics.median(r["step_ms"] for r in rows if r["tier"] == "disk")
stall = statistics.median(r["stall_s"] for r in rows if r["tier"] == "disk")
print(json.dumps({"bench": "disk_tier", "policy": sys.argv[2], "T": rows[0]["T"], "ram_step_ms": ram,
                  "disk_step_ms": disk, "disk_over_ram": disk / ram, "stall_s": stall,
                  "stall_fraction": stall * 1e3 / disk, "host": json.loads(os.environ["HOST_JSON"])}))
EOF
