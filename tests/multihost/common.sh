# Helpers for the multi-host tests: tests/cli/common.sh's, plus a namespace cluster (scripts/cluster.sh)
# that every test makes at its start and removes at its end, also when it fails or is interrupted.
# Usage: source common.sh "$@"  (args: odyssey binary, repo root). Without root or where network
# namespaces are not allowed, the test says so and exits 77 (ctest's SKIP_RETURN_CODE).
# shellcheck source=../cli/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../cli/common.sh" "$@"
CLUSTER="$ROOT/scripts/cluster.sh"
# One cluster name per test file, so a test killed before its trap ran is cleaned by its next run.
CLUSTER_NAME="mh$(basename "$0" .sh | tr -dc 'a-z' | head -c 4)"
if ! why=$(bash "$CLUSTER" check 2>&1); then
  echo "SKIP: no namespace cluster here: $why"
  rm -rf "$WORK"
  exit 77
fi
cluster_down() { bash "$CLUSTER" down --name "$CLUSTER_NAME" || echo "FAIL: cluster $CLUSTER_NAME not removed"; }
# On any end: this test's own background jobs (an mpirun runs outside the hosts, and waits for
# daemons that are gone once the cluster is: it is killed after), then the cluster.
trap 'kill $(jobs -p) 2>/dev/null; cluster_down; kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# tests/mpi_launch.env's PMIx hash store is for one host: with daemons on several hosts, MPI_Init of
# the ranks waits forever (Open MPI 4.1.4, PMIx 4.2), so these tests keep PMIx's default store.
unset PMIX_MCA_gds

# cluster_up N [cluster.sh options]: N hosts of 2 slots; CLUSTER_ARGS are mpirun's options for them.
cluster_up() {
  local dir
  dir=$(bash "$CLUSTER" up "$@" --name "$CLUSTER_NAME") || {
    echo "FAIL: cluster up $*"
    exit 1
  }
  read -ra CLUSTER_ARGS <"$dir/mpirun_args"
  CLUSTER_DIR="$dir"
}

# hosts_run NAME NP ARGS...: trains $cfg on NP ranks over the cluster's hosts (by slot: ranks 0,1 on
# the first host), metrics, checkpoints and the log in $WORK/NAME[.log].
hosts_run() {
  local name="$1" np="$2"
  shift 2
  timeout 300 mpirun "${CLUSTER_ARGS[@]}" -np "$np" "$ODYSSEY" train --config "$cfg" \
    --set "checkpoint.dir=$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 ||
    fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}
# one_host_run NAME NP ARGS...: the same on this host alone (shared memory).
one_host_run() {
  local name="$1" np="$2"
  shift 2
  timeout 300 mpirun --oversubscribe -np "$np" "$ODYSSEY" train --config "$cfg" \
    --set "checkpoint.dir=$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 ||
    fail "$name: exit code $? ($(tail -n 3 "$WORK/$name.log"))"
}

grad_norms() { grep -oE '"grad_norm":[^,}]*' "$WORK/$1/metrics.jsonl" | cut -d: -f2; }
# same_run NAME REF: every step's loss and gradient norm and the validation loss bitwise REF's.
same_run() {
  if [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] &&
    [ "$(grad_norms "$1")" = "$(grad_norms "$2")" ] && [ "$(val_loss "$1")" = "$(val_loss "$2")" ]; then
    echo "ok: $1 bitwise equal to $2 (losses, gradient norms, validation loss)"
  else
    fail "$1: not bitwise $2's: $(paste <(losses "$2") <(losses "$1") | head -3 | tr '\n' ' ')"
  fi
}
# nodes_seen NAME N: the run's grid saw N real (not emulated) nodes.
nodes_seen() {
  grep -qE "$2 node\(s\)$" "$WORK/$1.log" && echo "ok: $1 ran on $2 nodes as MPI reports them" ||
    fail "$1: grid did not see $2 real nodes: $(grep -m1 'node(s)' "$WORK/$1.log")"
}
