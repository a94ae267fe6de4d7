# Crash safety: a np 2 ZeRO-3 run saving every step (writers paused between files so kills land
# mid-save) is SIGKILLed at random points after its first complete save (every other kill as soon as
# a save is in progress), again and again, each time resuming. After every kill the
# step directories are all complete, inspect verifies them and reports the interrupted save, and
# incomplete directories (planted ones with a higher step too) are never loaded. The finally resumed
# run continues bit-identically to an uninterrupted one. ODYSSEY_CRASH_KILLS sets the number of kills
# (10 in the suite; the README records a run with 50).
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
common=(--set train.steps=300 --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.zero_stage=3 --set checkpoint.every=1 --set checkpoint.keep=2)
run="$WORK/crash"
mkdir -p "$run/step_99999999" "$run/.step_99999998.tmp"  # planted: no manifest, must never be loaded
echo junk >"$run/.step_99999998.tmp/params.rank00000.safetensors"

kills=${ODYSSEY_CRASH_KILLS:-10}
mid=0
RANDOM=7
for i in $(seq 1 "$kills"); do
  ODYSSEY_CHECKPOINT_PAUSE_MS=25 "${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" \
    --set "checkpoint.dir=$run" --set checkpoint.resume=true >/dev/null 2>"$WORK/err$i.txt" &
  pid=$!
  # Kill at a random moment after this run's first complete save (so every run makes progress however
  # loaded the machine is); saving every step with paused writers, most moments are mid-save.
  before=$(ls -d "$run"/step_0* 2>/dev/null | tail -n 1)
  for _ in $(seq 1 1200); do
    [ "$(ls -d "$run"/step_0* 2>/dev/null | tail -n 1)" != "$before" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if ((i % 2 == 0)); then
    # Even kills: as soon as a save is in progress (plus 0-40 ms), whatever the compute/save ratio
    # (under ASan a step's compute dwarfs the writers' pauses).
    for _ in $(seq 1 3000); do
      ls -d "$run"/.step_*.tmp 2>/dev/null | grep -qv 99999998 && break
      kill -0 $pid 2>/dev/null || break
      sleep 0.02
    done
    sleep "0.0$((RANDOM % 5))"
  else
    sleep "$(printf '0.%03d' $((RANDOM % 1000)))"
  fi
  kill -KILL $(pgrep -P $pid) 2>/dev/null
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  if grep -qi "error" "$WORK/err$i.txt"; then fail "kill $i: the run failed: $(grep -i error "$WORK/err$i.txt" | head -2)"; fi
  ls -d "$run"/.step_*.tmp 2>/dev/null | grep -v 99999998 >/dev/null && mid=$((mid + 1))
  "$ODYSSEY" checkpoint inspect "$run" >"$WORK/inspect$i.txt" 2>&1 || fail "kill $i: inspect found a problem: $(grep PROBLEM "$WORK/inspect$i.txt" | head -3)"
  grep -q "incomplete: .*step_99999999" "$WORK/inspect$i.txt" || fail "kill $i: inspect does not report the incomplete directory"
done
newest=$(ls -d "$run"/step_0* 2>/dev/null | tail -n 1)
[ -n "$newest" ] || fail "no complete checkpoint survived"
echo "ok: $kills kills, $mid landed mid-save; newest complete: $(basename "$newest")"
[ $mid -ge 1 ] || fail "no kill landed during a save"
grep -q "incomplete" "$WORK/inspect$kills.txt" && echo "ok: inspect reports incomplete saves: $(grep -c incomplete: "$WORK/inspect$kills.txt")"

# Resume once more, 3 steps, and compare with an uninterrupted run to the same step.
k=$(basename "$newest" | sed -E 's/step_0*//')
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" \
  --set checkpoint.resume=true --set train.exit_after=3 >/dev/null 2>"$WORK/final.txt" || fail "final resume: $(tail -3 "$WORK/final.txt")"
grep -q "resumed from $newest (step $k" "$WORK/final.txt" && echo "ok: resumed from the newest complete checkpoint (step $k)" ||
  fail "did not resume from $newest: $(grep resumed "$WORK/final.txt")"
"${MPIRUN[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/straight" \
  --set train.exit_after=$((k + 3)) >/dev/null 2>&1 || fail "straight run"
last=$(printf 'step_%08d' $((k + 3)))
if (for f in "$WORK/straight/$last"/*.safetensors; do cmp -s "$f" "$run/$last/$(basename "$f")" || exit 1; done); then
  echo "ok: after the kills, training continues bit-identically ($last)"
else
  fail "state after the kills differs from the uninterrupted run at $last"
fi
finish
