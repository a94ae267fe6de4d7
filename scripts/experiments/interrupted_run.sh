#!/usr/bin/env bash
# Interrupted runs (issue 18): a multi-rank run with periodic saves is interrupted at random moments
# and restarted (checkpoint.resume=true) until it completes; its final weights must equal, bit for bit,
# those of the same run done without interruption. Each interruption is one of
#   term-job   SIGTERM to mpirun (a scheduler's stop): every rank saves at the step boundary and exits
#   term-rank  SIGTERM to one rank: the ranks agree to stop at the same step boundary and save
#   kill-rank  SIGKILL to one rank (a crashed process): the job must end by itself within 10 s
#   kill-all   SIGKILL to mpirun and every rank at once (a node losing power)
# After each, the job must have ended (SIGTERM: within 60 s, SIGKILL: 10 s) and `odyssey checkpoint
# inspect` must find the newest complete checkpoint whole. At the end the script compares every
# tensor file of the final checkpoint with the uninterrupted run's (cmp, and prints their sha256) and
# the loss of every step logged by the interrupted attempts (replayed steps included) with the
# uninterrupted run's. Exits 1 on any difference, hang or damaged checkpoint.
#
#   bash scripts/experiments/interrupted_run.sh [minutes (30)] [ranks (4)]
# `minutes` is the length of the uninterrupted run: the script times a few steps first and sets
# train.steps so the run takes about that long on this machine, with a save about every 20 s; the
# interrupted run takes longer (the work lost to each SIGKILL is redone, and restarts cost a few
# seconds). Env: ODYSSEY (build/odyssey), STEPS (instead of the calibrated number), SEED (the kill schedule's random seed, 18),
# INTERRUPTIONS (2 a minute), ODYSSEY_CACHE (Brown text in $ODYSSEY_CACHE/brown/text), WORK (a scratch
# directory, removed at the end unless given).
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:-30}
np=${2:-4}
ODYSSEY=${ODYSSEY:-$PWD/build/odyssey}
SEED=${SEED:-18}
interruptions=${INTERRUPTIONS:-$((minutes * 2))}
cache=${ODYSSEY_CACHE:-$PWD/cache}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
log() { echo "interrupted_run: $*" >&2; }

# A byte-level GPT-2 (4 layers x 128, context 128) on the Brown corpus, ZeRO-1 over the ranks.
"$ODYSSEY" prepare --input "$cache"/brown/text/*.txt --output "$WORK/shards" --tokenizer bytes \
  --val-fraction 0.05 --quiet >/dev/null
base=(--config configs/tiny.toml --set model.n_layer=4 --set model.n_head=4 --set model.d_model=128
  --set model.seq_len=128 --set "data.train=$WORK/shards/train_*.bin" --set "data.val=$WORK/shards/val_*.bin"
  --set data.shuffle=true --set train.global_batch=8 --set train.micro_batch=2 --set train.warmup_steps=20
  --set parallel.zero_stage=1 --set log.every=1)
job_cmd=(mpirun -np "$np" --oversubscribe "$ODYSSEY" train "${base[@]}")

# Calibration: the median step time of a short run sets the number of steps (unless STEPS is given).
rm -rf "$WORK/calibration"
"${job_cmd[@]}" --set train.steps=30 --set "checkpoint.dir=$WORK/calibration" >/dev/null 2>&1
step_ms=$(python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l]
print(statistics.median(r["step_ms"] for r in rows[5:]))' "$WORK/calibration/metrics.jsonl")
steps=${STEPS:-$(python3 -c "print(max(20, int($minutes * 60000 / $step_ms)))")}
every=$(python3 -c "print(max(2, int(20000 / $step_ms)))")
final=$(printf 'step_%08d' "$steps")
job=(--set "train.steps=$steps" --set "checkpoint.every=$every" --set checkpoint.keep=3)
log "$np ranks, ${step_ms} ms a step: $steps steps, a save every $every steps, up to $interruptions interruptions"

t0=$(date +%s)
rm -rf "$WORK/straight" "$WORK/interrupted"
"${job_cmd[@]}" "${job[@]}" --set "checkpoint.dir=$WORK/straight" >"$WORK/straight.log" 2>&1
straight_s=$(($(date +%s) - t0))
log "uninterrupted run: ${straight_s} s"

# rank_pids PID: the rank processes of the mpirun PID, in rank order.
rank_pids() {
  local r p
  for r in $(seq 0 $((np - 1))); do
    for p in $(pgrep -P "$1"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r" && echo "$p"
    done
  done
}

# alive PID...: true while any of them runs (a zombie left unreaped by the container's init does not).
alive() {
  local p
  for p in "$@"; do
    [ -e "/proc/$p" ] && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] && return 0
  done
  return 1
}

RANDOM=$SEED
run="$WORK/interrupted"
modes=(term-job term-rank kill-rank kill-all)
attempt=0
failures=0
: >"$WORK/attempts.txt"
t0=$(date +%s)
mean_gap=$((minutes * 60 / (interruptions > 0 ? interruptions : 1)))
while [ ! -d "$run/$final" ]; do
  attempt=$((attempt + 1))
  "${job_cmd[@]}" "${job[@]}" --set "checkpoint.dir=$run" --set checkpoint.resume=true >"$WORK/attempt$attempt.log" 2>&1 &
  pid=$!
  if [ "$attempt" -gt "$interruptions" ]; then
    wait $pid || { log "attempt $attempt (no interruption) failed: $(tail -2 "$WORK/attempt$attempt.log")"; exit 1; }
    continue
  fi
  # A random moment, 2 s to twice the mean gap after the start (start-up included).
  gap_ds=$((20 + RANDOM % (mean_gap > 1 ? 20 * mean_gap - 20 : 1)))
  for _ in $(seq 1 "$gap_ds"); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 $pid 2>/dev/null; then
    # Ended before its interruption: only completing is fine.
    if wait $pid && [ -d "$run/$final" ]; then break; fi
    log "attempt $attempt ended by itself without completing: $(tail -2 "$WORK/attempt$attempt.log")"
    exit 1
  fi
  mode=${modes[$((RANDOM % ${#modes[@]}))]}
  ranks=()
  for _ in $(seq 1 100); do  # all ranks started (a slow start-up can outlast the gap)
    mapfile -t ranks < <(rank_pids $pid)
    [ ${#ranks[@]} -eq "$np" ] && break
    sleep 0.1
  done
  [ ${#ranks[@]} -eq "$np" ] || { log "attempt $attempt: $np ranks not found"; exit 1; }
  victim=$((RANDOM % np))
  [ "${mode#*-}" = rank ] || victim=-
  at=$(($(date +%s) - t0))
  case "$mode" in
    term-job) kill -TERM $pid ;;
    term-rank) kill -TERM "${ranks[$victim]}" ;;
    kill-rank) kill -KILL "${ranks[$victim]}" ;;
    kill-all) kill -KILL $pid "${ranks[@]}" ;;
  esac
  # The job has ended when mpirun and every rank have (mpirun may exit before its ranks).
  limit=$([ "${mode%%-*}" = term ] && echo 600 || echo 100)
  ended=""
  for i in $(seq 1 "$limit"); do
    alive $pid "${ranks[@]}" || { ended=$i; break; }
    sleep 0.1
  done
  if [ -z "$ended" ]; then
    log "attempt $attempt: the job still runs $((limit / 10)) s after $mode"
    failures=$((failures + 1))
    kill -KILL $pid "${ranks[@]}" 2>/dev/null || true
  fi
  rc=0
  wait $pid 2>/dev/null || rc=$?
  newest=$(ls -d "$run"/step_* 2>/dev/null | tail -n 1)
  if [ -n "$newest" ] && ! "$ODYSSEY" checkpoint inspect "$newest" >"$WORK/inspect$attempt.txt" 2>&1; then
    log "attempt $attempt: the newest checkpoint $newest is damaged: $(grep PROBLEM "$WORK/inspect$attempt.txt" | head -2)"
    failures=$((failures + 1))
  fi
  printf '%d %s rank%s %d %s %d %s\n' "$attempt" "$mode" "$victim" "$at" "$(echo "scale=1; ${ended:-$limit} / 10" | bc)" \
    "$rc" "$(basename "${newest:-none}")" >>"$WORK/attempts.txt"
  log "attempt $attempt: $mode (rank $victim) at ${at} s; ended in $(tail -n 1 "$WORK/attempts.txt" | cut -d' ' -f5) s, exit $rc; newest $(basename "${newest:-none}")"
done
interrupted_s=$(($(date +%s) - t0))

# The same weights: every file of the final checkpoint (params and moments of every rank).
identical=true
for f in "$WORK/straight/$final"/*.safetensors; do
  cmp -s "$f" "$run/$final/$(basename "$f")" || { identical=false; log "$(basename "$f") differs"; }
done
[ "$(ls "$WORK/straight/$final" | wc -l)" = "$(ls "$run/$final" | wc -l)" ] || identical=false
hashes=$(cd "$run/$final" && sha256sum ./*.safetensors | cut -c1-16 | paste -sd, -)
straight_hashes=$(cd "$WORK/straight/$final" && sha256sum ./*.safetensors | cut -c1-16 | paste -sd, -)
python3 - "$WORK" "$minutes" "$np" "$steps" "$every" "$step_ms" "$straight_s" "$interrupted_s" "$identical" \
  "$failures" "$hashes" "$straight_hashes" "$SEED" <<'PY'
import collections, json, sys
work, minutes, np_, steps, every, step_ms, straight_s, interrupted_s, identical, failures, hashes, straight_hashes, seed = sys.argv[1:]
straight = {r["step"]: r["loss"] for r in map(json.loads, open(f"{work}/straight/metrics.jsonl")) if "step" in r}
logged = [r for r in map(json.loads, open(f"{work}/interrupted/metrics.jsonl")) if "step" in r]
# Every step the attempts logged (metrics.jsonl is cut back to the resumed step on resume) has the
# uninterrupted run's loss, bit for bit.
loss_mismatch = [r["step"] for r in logged if straight.get(r["step"]) != r["loss"]]
attempts = [l.split() for l in open(f"{work}/attempts.txt")]
by_mode = collections.defaultdict(list)
for a in attempts:
    by_mode[a[1]].append(float(a[4]))
out = {
    "minutes": float(minutes), "ranks": int(np_), "steps": int(steps), "save_every": int(every),
    "step_ms": round(float(step_ms), 1), "seed": int(seed),
    "uninterrupted_s": int(straight_s), "interrupted_s": int(interrupted_s),
    "interruptions": {m: {"count": len(v), "max_seconds_to_end": max(v)} for m, v in sorted(by_mode.items())},
    "final_files_identical": identical == "true", "final_sha256_16": hashes, "uninterrupted_sha256_16": straight_hashes,
    "steps_logged": len(logged), "steps_with_different_loss": len(loss_mismatch),
    "hangs_or_damaged_checkpoints": int(failures),
}
print(json.dumps(out, indent=1))
sys.exit(0 if out["final_files_identical"] and not loss_mismatch and not int(failures) else 1)
PY
