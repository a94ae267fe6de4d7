# Faults: one rank of a 4-rank ZeRO-1 run SIGKILLed mid-step, mid-collective and mid-save. Each time
# the whole job ends within 10 s (no hang), non-zero, with the killed rank named; the newest complete
# checkpoint is loadable (inspect finds no problem) and resuming from it continues exactly: the final
# weights equal those of an uninterrupted run bit for bit.
#   mid-step:       a random moment after the first save (most of a step is compute)
#   mid-collective: rank 0 is stopped (SIGSTOP), so the others wait inside the step's next collective;
#                   one of them is killed there, then rank 0 continued
#   mid-save:       writers pause between files (ODYSSEY_CHECKPOINT_PAUSE_MS); killed while a
#                   .step_*.tmp directory exists
source "$(dirname "$0")/common.sh" "$@"
tiny_setup
# Steps enough that the job runs on for ~2 s after its first save (a step of this model takes ~20 ms
# at 4 ranks on 2 cores), so each kill lands in a running job.
steps=96
common=(--set train.steps=$steps --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set parallel.zero_stage=1 --set checkpoint.every=8)

"${MPIRUN[@]}" -np 4 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$WORK/straight" \
  >/dev/null 2>&1 || fail "uninterrupted run"
final=$(printf 'step_%08d' $steps)

# rank_pid MPIRUN_PID RANK: the pid of that rank's process (Open MPI puts the rank in its environment).
rank_pid() {
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p" && return
  done
}

# kill_case NAME RANK: runs the job in $WORK/NAME, waits for its first save, kills RANK the NAME way,
# then checks the end of the job, the surviving checkpoint and the exact resume.
kill_case() {
  local name="$1" rank="$2" run="$WORK/$1" pid victim start elapsed rc
  ODYSSEY_CHECKPOINT_PAUSE_MS=$([ "$name" = mid-save ] && echo 200 || echo 0) \
    "${MPIRUN[@]}" -np 4 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" \
    >/dev/null 2>"$WORK/$name.err" &
  pid=$!
  for _ in $(seq 1 600); do
    ls -d "$run"/step_0* >/dev/null 2>&1 && break
    sleep 0.1
  done
  victim=$(rank_pid $pid "$rank")
  if [ -z "$victim" ]; then
    fail "$name: rank $rank not found (the run ended early: $(tail -2 "$WORK/$name.err"))"
    wait $pid
    return
  fi
  case "$name" in
    mid-step) sleep "0.$((RANDOM % 10))" ;;
    mid-collective)
      local r0
      r0=$(rank_pid $pid 0)
      kill -STOP "$r0"
      sleep 1
      ;;
    mid-save)
      for _ in $(seq 1 600); do
        ls -d "$run"/.step_*.tmp >/dev/null 2>&1 && break
        sleep 0.02
      done
      ls -d "$run"/.step_*.tmp >/dev/null 2>&1 || fail "$name: no save in progress"
      ;;
  esac
  start=$(date +%s.%N)
  kill -KILL "$victim"
  [ "$name" = mid-collective ] && kill -CONT "$r0"
  # The job must end by itself; after 10 s it is killed and the case fails.
  for _ in $(seq 1 100); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $pid 2>/dev/null; then
    fail "$name: the job still runs 10 s after rank $rank was killed"
    kill -KILL $(pgrep -P $pid) $pid 2>/dev/null
  fi
  wait $pid
  rc=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  [ $rc -ne 0 ] || fail "$name: exit code 0 after a rank was killed"
  grep -qE "rank $rank( |\b).*(exited on signal|killed)|process rank $rank " "$WORK/$name.err" &&
    echo "ok: $name: job ended in ${elapsed}s, exit $rc, naming rank $rank" ||
    fail "$name: the message does not name rank $rank: $(tail -3 "$WORK/$name.err")"

  "$ODYSSEY" checkpoint inspect "$run" >"$WORK/$name.inspect" 2>&1 ||
    fail "$name: inspect found a problem: $(grep PROBLEM "$WORK/$name.inspect" | head -2)"
  "${MPIRUN[@]}" -np 4 "$ODYSSEY" train --config "$cfg" "${common[@]}" --set "checkpoint.dir=$run" \
    --set checkpoint.resume=true >/dev/null 2>"$WORK/$name.resume" || fail "$name: resume: $(tail -2 "$WORK/$name.resume")"
  grep -o "resumed from [^ ]*" "$WORK/$name.resume" | head -n 1
  if (for f in "$WORK/straight/$final"/*.safetensors; do cmp -s "$f" "$run/$final/$(basename "$f")" || exit 1; done); then
    echo "ok: $name: resumed run ends bit-identical to the uninterrupted one ($final)"
  else
    fail "$name: weights at $final differ from the uninterrupted run"
  fi
}

RANDOM=18
kill_case mid-step 2
kill_case mid-collective 1
kill_case mid-save 3
finish
