#!/usr/bin/env bash
# Training across hosts over shaped links (docs/multi-node.md): a namespace cluster of HOSTS hosts x
# 2 ranks (scripts/cluster.sh; root), each host's link shaped to RATE in both directions (tc tbf), and
# every layout trained STEPS steps on dp = 2 x HOSTS:
#   fp32_zero1   ZeRO-1, fp32 communication
#   fp32_zero1_b4  the same with 4 MB gradient buckets (the default 25 MB makes this model one bucket,
#                reduced only after the whole backward: nothing left to overlap it with)
#   fp32_zero3   ZeRO-3, fp32 communication
#   sdp4bit      SDP4Bit: qWD weights + TLq-HS gradients (Hadamard, 8/4-bit two-level), grad_pipeline 8, ZeRO-1
#   zeropp       ZeRO++: int4 qwZ weights + hpZ + qgZ gradients, ZeRO-3
#   bf16_zero1   train.precision = bf16 (a bf16 model copy: weights gathered in bf16, gradients
#                reduced in fp32), ZeRO-1
#   bf16_zero1_b4  the same with 4 MB gradient buckets
#   bf16_zero3   bf16, ZeRO-3 (the units gathered in bf16)
# and once more with all ranks on this host over shared memory and the nodes emulated
# (parallel.ranks_per_node = 2): the compute-only reference ("shm").
#
#   sudo bench/multinode.sh                       # HOSTS="2" RATES="1gbit 100mbit" STEPS=4
#   HOSTS="2 4" RATES="10gbit 1gbit 100mbit" sudo bench/multinode.sh
#
# The model is the issue's (4 layers, d_model 256, vocabulary 8,192: 5.3M parameters, 21 MB of fp32
# gradients) with a step of BATCH (4) rows of SEQ (64) tokens, so that on this 2-core machine the
# step's compute (~1 s for 4 ranks) is below what fp32 ZeRO moves over a 100 Mbit/s link (~3 s) and
# above it at 10 Gbit/s (the issue's T = 256, 8 rows: SEQ=256 BATCH=8). Data: the Brown corpus as
# bytes (prepared into $WORK once).
#
# One JSON line per run, to stdout and to bench/results/multinode/<date>_<commit>.jsonl: step time and
# tokens/s (medians over the steps after the first), the bytes that crossed between hosts per step
# (comm.inter_node_sent_bytes_all_ranks) and per host link, the link's seconds per step at its rate
# and its utilisation (those seconds over the step), rank 0's seconds in communication calls, the
# validation loss after STEPS steps; with the CPU, the commit, the date and the load average at the
# end of the run (the machine's 2 cores are shared: all 2 x HOSTS ranks and any other work run on
# them, so times are upper bounds). The shm line of a layout is its compute-only reference: the
# bound overlap would reach is max(shm step, link seconds).
#
# OVERLAP (default "auto"): the comm.overlap_thread values each layout runs with (e.g. "off on": ZeRO's
# collectives on the main thread, then on the communication thread); REPS (default 1): repetitions,
# alternating the layouts and settings within each, so that a load change on the shared machine falls
# on all of them alike. Each line adds rank 0's dp_comm figures (the time the compute waited for ZeRO's
# collectives; with the thread also their whole time and the share hidden), the repetition and the
# mpirun command.
# --delay (tc netem) is used when DELAY is set and the kernel has sch_netem; this project's CI kernel
# has not, so by default links are shaped in rate only.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. bench/common.sh
HOSTS=${HOSTS:-2}
RATES=${RATES:-"1gbit 100mbit"}
STEPS=${STEPS:-4}
DELAY=${DELAY:-}
LAYOUTS=${LAYOUTS:-"fp32_zero1 fp32_zero3 sdp4bit zeropp bf16_zero1 bf16_zero3"}
OVERLAP=${OVERLAP:-auto}
REPS=${REPS:-1}
bench_init multinode
unset PMIX_MCA_gds  # one host's setting: with daemons on several hosts MPI_Init never returns
NAME=odybn
trap 'bash scripts/cluster.sh down --name $NAME; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
bash scripts/cluster.sh check || exit 1

bench_prepare_bytes || exit 1
cfg="$WORK/model.toml"
bench_model_toml "$cfg" "${SEQ:-64}" "${BATCH:-4}" 16

layout_args() {
  case "$1" in
    fp32_zero1) echo "--set parallel.zero_stage=1" ;;
    fp32_zero1_b4) echo "--set parallel.zero_stage=1 --set parallel.bucket_mb=4" ;;  # 5 buckets, not 1
    fp32_zero3) echo "--set parallel.zero_stage=3" ;;
    sdp4bit) echo "--set parallel.zero_stage=1 --set comm.weights=qwd --set comm.grads=tlq_hs --set comm.grad_pipeline=8" ;;
    zeropp) echo "--set parallel.zero_stage=3 --set comm.weights=int4 --set comm.grads=qgz --set comm.hpz=true" ;;
    bf16_zero1) echo "--set parallel.zero_stage=1 --set train.precision=bf16" ;;
    bf16_zero1_b4) echo "--set parallel.zero_stage=1 --set parallel.bucket_mb=4 --set train.precision=bf16" ;;
    bf16_zero3) echo "--set parallel.zero_stage=3 --set train.precision=bf16" ;;
    *) echo "multinode: unknown layout '$1'" >&2 && return 1 ;;
  esac
}

for layout in $LAYOUTS; do layout_args "$layout" >/dev/null || exit 2; done

# record DIR LAYOUT HOSTS RATE OVERLAP REP COMMAND...: the run's JSON line (appended to $OUT and printed).
record() {
  python3 - "$@" <<'PY' | tee -a "$OUT"
import json, os, statistics, sys
d, layout, hosts, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
overlap, rep, command = sys.argv[5], int(sys.argv[6]), " ".join(sys.argv[7:])
rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"step_ms"' in l]
timed = rows[1:] if len(rows) > 1 else rows  # the first step warms up
step_ms = statistics.median(r["step_ms"] for r in timed)
# The run's mean over every step: with the communication thread a collective's bytes are counted
# when the thread sends them, so a deferred one can fall into the next step's record (the total holds).
inter = statistics.mean(r["comm"].get("inter_node_sent_bytes_all_ranks", 0) for r in rows)
host = json.loads(os.environ["HOST_JSON"])
out = {"layout": layout, "hosts": hosts, "ranks": 2 * hosts, "link": rate,
       "steps": len(rows), "step_ms": round(step_ms, 1),
       "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in timed), 1),
       "inter_node_bytes_per_step": int(inter),
       "bus_bytes_per_rank_per_step": int(statistics.median(r["comm"]["total_bytes"] for r in timed)),
       # rank 0's time in communication calls (a non-blocking one from its start to its wait, so this
       # bounds the exposed communication from above)
       "comm_seconds_per_step": round(statistics.median(r["comm"]["seconds"] for r in timed), 3),
       "val_loss": round(rows[-1].get("val_loss", float("nan")), 5),
       "overlap_thread": overlap, "rep": rep, "command": command,
       "cpu": host.get("cpu", host.get("cpu_model")), "commit": os.environ["COMMIT"], "date": os.environ["DATE"],
       "load_average": os.getloadavg()[0]}
dp = [r["dp_comm"] for r in timed if "dp_comm" in r]
if dp:
    out["dp_thread"] = dp[0]["thread"]
    out["dp_exposed_ms"] = round(statistics.median(x["exposed_ms"] for x in dp), 1)
    if dp[0]["thread"]:
        out["dp_comm_ms"] = round(statistics.median(x["comm_ms"] for x in dp), 1)
        out["dp_hidden_fraction"] = round(statistics.median(x["hidden_fraction"] for x in dp), 3)
units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
for u, f in units.items():
    if rate.endswith(u):
        bits = float(rate[: -len(u)]) * f
        per_link = inter / hosts  # bytes each host's link sends per step (the layouts are symmetric)
        out["link_bytes_per_step"] = int(per_link)
        out["link_seconds_per_step"] = round(per_link * 8 / bits, 4)
        out["link_utilisation"] = round(per_link * 8 / bits / (step_ms / 1e3), 3)
print(json.dumps(out))
PY
}

for hosts in $HOSTS; do
  np=$((2 * hosts))
  # The compute-only reference (the collectives over shared memory, on the main thread).
  for rep in $(seq "$REPS"); do
    for layout in $LAYOUTS; do
      read -ra args <<<"$(layout_args "$layout")"
      dir="$WORK/${layout}_${hosts}h_shm_$rep"
      cmd=(mpirun --oversubscribe -np "$np" "$BIN" train --config "$cfg" --set "checkpoint.dir=$dir"
        --set train.steps="$STEPS" --set parallel.ranks_per_node=2 --set comm.overlap_thread=off "${args[@]}")
      timeout 900 "${cmd[@]}" >"$dir.log" 2>&1 && record "$dir" "$layout" "$hosts" shm off "$rep" "${cmd[@]}" ||
        echo "{\"layout\":\"$layout\",\"link\":\"shm\",\"error\":\"$(tail -n 1 "$dir.log")\"}"
    done
  done
  for rate in $RATES; do
    bash scripts/cluster.sh up "$hosts" --name $NAME --rate "$rate" ${DELAY:+--delay "$DELAY"} >/dev/null || exit 1
    read -ra cluster_args <"/run/odyssey-cluster/$NAME/mpirun_args"
    for rep in $(seq "$REPS"); do
      for layout in $LAYOUTS; do
        for overlap in $OVERLAP; do
          read -ra args <<<"$(layout_args "$layout")"
          dir="$WORK/${layout}_${hosts}h_${rate}_${overlap}_$rep"
          cmd=(mpirun "${cluster_args[@]}" -np "$np" "$BIN" train --config "$cfg" --set "checkpoint.dir=$dir"
            --set train.steps="$STEPS" --set comm.overlap_thread="$overlap" "${args[@]}")
          timeout 900 "${cmd[@]}" >"$dir.log" 2>&1 &&
            record "$dir" "$layout" "$hosts" "$rate" "$overlap" "$rep" "${cmd[@]}" ||
            echo "{\"layout\":\"$layout\",\"link\":\"$rate\",\"error\":\"$(tail -n 1 "$dir.log")\"}"
        done
      done
    done
    bash scripts/cluster.sh down --name $NAME
  done
done
echo "multinode: results in $OUT" >&2
