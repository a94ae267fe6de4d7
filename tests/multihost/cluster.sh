# The namespace cluster itself (scripts/cluster.sh): up makes N hosts with their own hostnames and
# addresses that mpirun starts ranks in (as distinct nodes: MPI's shared-memory split puts each host's
# ranks apart), a shaped link is refused bad rates, and the cluster is left clean after a test that
# fails with ranks still running and after one interrupted (SIGTERM, SIGINT) mid-run: no namespace,
# no link, no state, no process. down is idempotent.
source "$(dirname "$0")/common.sh" "$@"

# left NAME: what a cluster NAME left behind (namespaces, links, state), empty when clean.
left() {
  { ip netns list | grep -E "^$1-h[0-9]+" || true; } | tr '\n' ' '
  { ip -o link show | grep -E ": $1-(br|h[0-9]+-br)[@:]" || true; } | cut -d: -f2 | tr '\n' ' '
  [ -e "/run/odyssey-cluster/$1" ] && echo "/run/odyssey-cluster/$1"
  pgrep -f "checkpoint.dir=$WORK/orphan" || true
}

cluster_up 3 --rate 1gbit
# Each rank's hostname and address (one launch: each costs seconds here).
ranks=$(timeout 60 mpirun "${CLUSTER_ARGS[@]}" -np 3 --map-by node \
  sh -c 'echo "$(hostname) $(ip -4 -o addr show ody0 | awk "{print \$4}")"' | sort)
hosts=$(awk '{print $1}' <<<"$ranks" | tr '\n' ' ')
[ "$hosts" = "$CLUSTER_NAME-h0 $CLUSTER_NAME-h1 $CLUSTER_NAME-h2 " ] && echo "ok: one rank on each host: $hosts" ||
  fail "hostnames of the ranks: '$hosts'"
addrs=$(awk '{print $2}' <<<"$ranks" | sort | tr '\n' ' ')
want=$(awk '{printf "%s/24 ", $3}' "$CLUSTER_DIR/hosts")
[ "$addrs" = "$want" ] && echo "ok: addresses $addrs" || fail "addresses: '$addrs', expected '$want'"
qdisc=$(ip netns exec "$CLUSTER_NAME-h1" tc qdisc show dev ody0)
grep -q "tbf.*rate 1Gbit" <<<"$qdisc" && echo "ok: link shaped: $qdisc" || fail "not shaped: $qdisc"
make_shards "$WORK/data"
cfg="$WORK/tiny.toml"
tiny_config "$WORK/data/shards" "$cfg"
hosts_run nodes 4 --set train.steps=2 --set train.micro_batch=1 --set parallel.zero_stage=1
nodes_seen nodes 2
grep -qE "intra_node .* members \[0,1\]" "$WORK/nodes.log" && grep -qE "inter_node .* members \[0,2\]" "$WORK/nodes.log" &&
  echo "ok: rank 0 shares its node with rank 1 and crosses to rank 2" ||
  fail "grid placement: $(grep -E 'intra_node|inter_node' "$WORK/nodes.log")"
cluster_down
[ -z "$(left "$CLUSTER_NAME")" ] && echo "ok: down removed everything" || fail "down left: $(left "$CLUSTER_NAME")"
bash "$CLUSTER" down --name "$CLUSTER_NAME" && echo "ok: down again succeeds" || fail "a second down failed"
expect_error "bad rate" "rate" bash "$CLUSTER" up 2 --name mhbad --rate fast
[ -z "$(left mhbad)" ] && echo "ok: a failed up leaves nothing" || fail "failed up left: $(left mhbad)"

# A test that fails, or is interrupted, while its ranks run on the hosts: a child test of its own
# (this file's helpers), whose cluster must be gone when it has ended. Each child trains into a
# directory of its own: a child stopped by a signal saves a checkpoint there, which a later child's
# run would refuse to overwrite (ending at once, before it could be interrupted).
child="$WORK/child.sh"
cat >"$child" <<CHILD
# args: odyssey, repo root, fail | wait
source "$ROOT/tests/multihost/common.sh" "\$1" "\$2"
cluster_up 2
mpirun "\${CLUSTER_ARGS[@]}" -np 4 "$ODYSSEY" train --config "$cfg" --set train.steps=100000 --set train.micro_batch=1 \\
  --set "checkpoint.dir=$WORK/orphan-\$\$" >/dev/null 2>&1 &
[ "\$3" = fail ] && { ranks_running \$\$; fail "deliberately"; finish; }
wait
CHILD
# ranks_running PID: waits (up to 30 s) until the 4 ranks of child PID's job run on its hosts.
ranks_running() {
  for _ in $(seq 1 300); do
    [ "$(pgrep -fc "^$ODYSSEY train .*orphan-$1( |$)")" -ge 4 ] && return 0
    sleep 0.1
  done
  return 1
}
export -f ranks_running
export ODYSSEY
# common.sh names the child's cluster after its file: mh + "chil".
for how in fail TERM INT; do
  if [ $how = fail ]; then
    bash "$child" "$ODYSSEY" "$ROOT" fail >/dev/null 2>&1 && fail "the failing child passed"
  else
    # A background job of a script starts with SIGINT ignored (and bash cannot trap an ignored
    # signal): the child gets the default dispositions back, as a test started by ctest has them.
    python3 -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' bash "$child" "$ODYSSEY" "$ROOT" wait >"$WORK/child_$how.log" 2>&1 &
    pid=$!
    ranks_running $pid || fail "the child's ranks did not start within 30 s: $(tail -n 5 "$WORK/child_$how.log")"
    kill -0 $pid 2>/dev/null || fail "the child test ended before it was interrupted: $(tail -n 5 "$WORK/child_$how.log")"
    kill -$how $pid
    wait $pid
  fi
  sleep 1
  [ -z "$(left mhchil)" ] && echo "ok: clean after a child test that ended by $how" || fail "after $how: $(left mhchil)"
  bash "$CLUSTER" down --name mhchil >/dev/null 2>&1
done
finish
