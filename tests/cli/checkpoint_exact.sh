# Exact resume of the universal checkpoint at np 2: for ZeRO 0-3, 12 steps straight equal 6 steps,
# stop, 6 resumed, bit for bit (losses, gradient norms, final params/m/v files). And a run receiving
# SIGTERM saves at the next step boundary, exits 0, and resumes exactly.
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=12 --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.bucket_mb=0.05)
strip() { sed -E 's/.*"grad_norm":([^,]*).*"loss":([^,]*).*"step":([0-9]+).*/\3 \2 \1/' "$1"; }
same_files() {  # same_files DIR_A DIR_B: every safetensors file byte-identical
  local f ok=0
  for f in "$1"/*.safetensors; do cmp -s "$f" "$2/$(basename "$f")" || ok=1; done
  [ "$(ls "$1"/*.safetensors | wc -l)" -eq 6 ] || ok=1
  return $ok
}

for stage in 0 1 2 3; do
  z=(--set parallel.zero_stage=$stage)
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" "${z[@]}" --set "checkpoint.dir=$WORK/full$stage" \
    >/dev/null 2>"$WORK/err.txt" || fail "ZeRO-$stage full run: $(tail -3 "$WORK/err.txt")"
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" "${z[@]}" --set "checkpoint.dir=$WORK/split$stage" \
    --set train.exit_after=6 >/dev/null 2>&1 || fail "ZeRO-$stage first half"
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" "${z[@]}" --set "checkpoint.dir=$WORK/split$stage" \
    --set checkpoint.resume=true >/dev/null 2>"$WORK/err.txt" || fail "ZeRO-$stage resume: $(tail -3 "$WORK/err.txt")"
  if diff <(strip "$WORK/full$stage/metrics.jsonl") <(strip "$WORK/split$stage/metrics.jsonl") >/dev/null &&
    same_files "$WORK/full$stage/step_00000012" "$WORK/split$stage/step_00000012"; then
    echo "ok: ZeRO-$stage np 2: resumed losses, norms and final params/m/v bit-identical"
  else
    fail "ZeRO-$stage np 2 resume differs"
  fi
done

# SIGTERM to one rank: all ranks agree to stop, save that step and exit 0; resuming gives the
# uninterrupted run's losses exactly. Slow steps (bigger batch) so the signal lands mid-run.
long=(--set train.steps=400 --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.zero_stage=2)
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${long[@]}" --set "checkpoint.dir=$WORK/term" \
  >"$WORK/term.json" 2>"$WORK/term.err" &
pid=$!
for _ in $(seq 1 200); do
  [ -f "$WORK/term/metrics.jsonl" ] && [ "$(wc -l <"$WORK/term/metrics.jsonl")" -ge 5 ] && break
  sleep 0.05
done
rank=$(pgrep -P $pid | head -n 1)
[ -n "$rank" ] && kill -TERM "$rank"
wait $pid
rc=$?
k=$(ls -d "$WORK"/term/step_* 2>/dev/null | tail -n 1 | sed -E 's/.*step_0*//')
if [ $rc -eq 0 ] && grep -q '"stopped_by_signal":true' "$WORK/term.json" && [ -n "$k" ] && [ "$k" -lt 400 ]; then
  echo "ok: SIGTERM: exit 0 with a checkpoint at step $k"
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${long[@]}" --set "checkpoint.dir=$WORK/term" \
    --set checkpoint.resume=true --set train.exit_after=5 >/dev/null 2>&1 || fail "resume after SIGTERM"
  "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${long[@]}" --set "checkpoint.dir=$WORK/straight" \
    --set train.exit_after=$((k + 5)) >/dev/null 2>&1 || fail "straight run"
  if diff <(strip "$WORK/straight/metrics.jsonl" | tail -n 5) <(strip "$WORK/term/metrics.jsonl" | tail -n 5) >/dev/null &&
    same_files "$WORK/straight/step_$(printf %08d $((k + 5)))" "$WORK/term/step_$(printf %08d $((k + 5)))"; then
    echo "ok: SIGTERM checkpoint resumes bit-identically (steps $((k + 1))..$((k + 5)))"
  else
    fail "resume after SIGTERM differs"
  fi
else
  fail "SIGTERM: rc $rc, checkpoint step '$k', out $(cat "$WORK/term.json") $(tail -3 "$WORK/term.err")"
fi
finish
