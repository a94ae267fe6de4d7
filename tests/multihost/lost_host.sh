# A lost host. A dp 4 ZeRO-3 run over 2 hosts x 2 ranks saves a checkpoint every 4 steps; after its
# first save, host 1 is lost, once by cutting its link (ip link set ody0 down, inside its namespace:
# its ranks and its Open MPI daemon live on but nothing reaches them) and once by killing every
# process on it (SIGKILL: the daemon and the ranks). Each time the job must end by itself within
# 60 s, non-zero, with an error that names the lost host; the newest checkpoint must be complete
# (checkpoint inspect finds no problem: nothing half-written) and resuming it on the host that
# remains, at dp 2 (ZeRO-1 over 2 ranks), must continue exactly as a reshard does: the same losses
# as the same checkpoint resumed at np 2 on this host alone (checkpoint_reshard.sh's path), bit for
# bit, and within relative 1e-5 of the uninterrupted 4-rank run.
# Open MPI notices a silent host through the keepalive of its daemons' connections
# (oob_tcp_keepalive_*, set by scripts/cluster.sh's mpirun_args: probes after 2 s idle, every 1 s,
# 3 unanswered = lost; the defaults would wait 300 s + 9 x 20 s).
source "$(dirname "$0")/common.sh" "$@"
make_shards "$WORK/data"
cfg="$WORK/tiny.toml"
tiny_config "$WORK/data/shards" "$cfg"
steps=200
resumed=6  # steps each resumed run trains
common=(--set "train.steps=$steps" --set train.global_batch=4 --set train.micro_batch=1 --set data.shuffle=true
  --set checkpoint.every=4 --set train.threads=1)

# lose NAME HOW: runs the job across the hosts, loses host 1 the HOW way (cut | kill) after the first
# save, checks the end of the job, the checkpoint and the resumed run on host 0; NEWEST[NAME] is the
# step of the checkpoint it resumed.
declare -A NEWEST
lose() {
  local name="$1" how="$2" run="$WORK/$1" pid start elapsed rc ns="$CLUSTER_NAME-h1" newest
  cluster_up 2
  mpirun "${CLUSTER_ARGS[@]}" -np 4 "$ODYSSEY" train --config "$cfg" "${common[@]}" \
    --set parallel.zero_stage=3 --set "checkpoint.dir=$run" >"$WORK/$name.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    ls -d "$run"/step_0* >/dev/null 2>&1 && break
    sleep 0.1
  done
  ls -d "$run"/step_0* >/dev/null 2>&1 || fail "$name: no checkpoint within 60 s: $(tail -3 "$WORK/$name.log")"
  sleep 0.3
  kill -0 $pid 2>/dev/null || fail "$name: the job ended before host 1 was lost: $(tail -3 "$WORK/$name.log")"
  start=$(date +%s.%N)
  case "$how" in
    cut) ip -n "$ns" link set ody0 down ;;
    kill) for p in $(ip netns pids "$ns"); do kill -KILL "$p" 2>/dev/null; done ;;
  esac
  for _ in $(seq 1 600); do
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 $pid 2>/dev/null; then
    fail "$name: the job still runs 60 s after host 1 was lost"
    kill -KILL $pid 2>/dev/null
  fi
  wait $pid
  rc=$?
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  [ $rc -ne 0 ] || fail "$name: exit code 0 after host 1 was lost"
  if grep -qE "$ns|process rank [23] " "$WORK/$name.log"; then
    echo "ok: $name: the job ended ${elapsed}s after host 1 was lost, exit $rc: $(grep -m1 -oE "[^:]*$ns.*|process rank [23] .*" "$WORK/$name.log")"
  else
    fail "$name: the error does not name host $ns or its ranks: $(tail -5 "$WORK/$name.log")"
  fi
  bash "$CLUSTER" down --name "$CLUSTER_NAME" || fail "$name: cluster not removed"
  "$ODYSSEY" checkpoint inspect "$run" >"$WORK/$name.inspect" 2>&1 ||
    fail "$name: inspect found a problem: $(grep -m2 PROBLEM "$WORK/$name.inspect")"
  newest=$(ls -d "$run"/step_0* | tail -n 1)
  # The host that remains: 2 ranks (dp 2, ZeRO-1) resume on it; the same checkpoint resumed on this
  # host alone is the reshard path.
  cp -r "$run" "$run.reshard"
  cluster_up 1
  timeout 300 mpirun "${CLUSTER_ARGS[@]}" -np 2 "$ODYSSEY" train --config "$cfg" "${common[@]}" \
    --set parallel.zero_stage=1 --set "checkpoint.dir=$run" --set checkpoint.resume=true --set train.exit_after=$resumed \
    >"$WORK/$name.resume.log" 2>&1 || fail "$name: resume on the remaining host: $(tail -3 "$WORK/$name.resume.log")"
  one_host_run "$name.reshard" 2 "${common[@]}" --set parallel.zero_stage=1 --set checkpoint.resume=true \
    --set train.exit_after=$resumed
  grep -q "written at world size 4, ZeRO stage 3" "$WORK/$name.resume.log" ||
    fail "$name: the resume did not report resharding from world size 4"
  echo "   resumed $(grep -m1 -oE 'resumed from [^ ]*' "$WORK/$name.resume.log") ($(basename "$newest"))"
  [ -n "$(losses "$name.reshard")" ] && [ "$(losses "$name")" = "$(losses "$name.reshard")" ] &&
    echo "ok: $name: resumed on the remaining host, bitwise the one-host reshard" ||
    fail "$name: resumed losses differ from the one-host reshard's"
  NEWEST[$name]=$((10#$(basename "$newest" | tr -dc 0-9)))
  bash "$CLUSTER" down --name "$CLUSTER_NAME" || fail "$name: cluster not removed"
}

lose link_cut cut
lose processes_killed kill

# The uninterrupted run (one host), for the reshard comparison: as far as the later resumed run went
# (of the 200 steps the schedule is laid out for).
last=$(printf '%s\n' "${NEWEST[@]}" | sort -n | tail -n 1)
one_host_run straight 4 "${common[@]}" --set parallel.zero_stage=3 --set parallel.ranks_per_node=2 \
  --set train.exit_after=$((last + resumed))
for name in link_cut processes_killed; do
  if python3 - "$WORK/straight/metrics.jsonl" "$WORK/$name/metrics.jsonl" "${NEWEST[$name]}" "$resumed" <<'PY'; then
import json, sys
ref = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
got = {}
for r in map(json.loads, open(sys.argv[2])):
    got[r["step"]] = r["loss"]  # the resumed run's records come last
first = int(sys.argv[3]) + 1
steps = range(first, first + int(sys.argv[4]))
for s in steps:
    assert s in got and abs(ref[s] - got[s]) <= 1e-5 * abs(ref[s]), (s, ref.get(s), got.get(s))
PY
    echo "ok: $name: $resumed resumed steps within 1e-5 of the uninterrupted run"
  else
    fail "$name: resumed losses differ from the uninterrupted run"
  fi
done
finish
