#!/usr/bin/env bash
# The engine's two ZeRO collectives alone over a shaped link (docs/multi-node.md, "Why a 100 Mbit/s
# link carries only 50-60% of its rate"): a namespace cluster of 2 hosts x 2 ranks (scripts/cluster.sh;
# root) with RATE (default 100mbit) links; MPI_Iallgather and MPI_Ireduce_scatter_block (the calls of
# comm/mpi_communicator.cpp) of N floats in all (default 5.3M: the bench model's fp32 ZeRO-1 vector),
# REPS (3) times each, and the bytes each host's interface sent per call. Prints one line per call.
#   sudo bench/link_collectives.sh              # RATE=100mbit N=5300000 REPS=3
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RATE=${RATE:-100mbit} N=${N:-5300000} REPS=${REPS:-3}
NAME=odylc
WORK=$(mktemp -d)
trap 'bash scripts/cluster.sh down --name $NAME; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
bash scripts/cluster.sh check || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset PMIX_MCA_gds  # one host's setting: with daemons on several hosts MPI_Init never returns
cat >"$WORK/coll.c" <<'C'
// coll N REPS OP: OP (ag: MPI_Iallgather, rs: MPI_Ireduce_scatter_block) of N floats in all, REPS times
// after a barrier each; rank 0 prints the median seconds.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  long S = atol(argv[1]) / P;
  int reps = atoi(argv[2]);
  float* all = calloc(S * P, sizeof(float));
  float* mine = calloc(S, sizeof(float));
  double t[64];
  for (int i = 0; i < reps && i < 64; ++i) {
    MPI_Request q;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (!strcmp(argv[3], "ag")) MPI_Iallgather(mine, S, MPI_FLOAT, all, S, MPI_FLOAT, MPI_COMM_WORLD, &q);
    else MPI_Ireduce_scatter_block(all, mine, S, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    t[i] = MPI_Wtime() - t0;
  }
  qsort(t, reps, sizeof(double), cmp);
  if (r == 0) printf("%.3f\n", t[reps / 2]);
  MPI_Finalize();
  return 0;
}
C
mpicc -O2 -o "$WORK/coll" "$WORK/coll.c" || exit 1
bash scripts/cluster.sh up 2 --name $NAME --rate "$RATE" >/dev/null || exit 1
read -ra args <"/run/odyssey-cluster/$NAME/mpirun_args"
tx() { ip netns exec "$NAME-h$1" cat /sys/class/net/ody0/statistics/tx_bytes; }
for op in ag rs; do
  a0=$(tx 0) a1=$(tx 1)
  s=$(timeout 600 mpirun "${args[@]}" -np 4 "$WORK/coll" "$N" "$REPS" $op) || exit 1
  b0=$(tx 0) b1=$(tx 1)
  # Per call: the launch's own few kB are spread over the REPS calls.
  awk -v op=$op -v s="$s" -v h0=$(((b0 - a0) / REPS)) -v h1=$(((b1 - a1) / REPS)) -v rate="$RATE" -v n="$N" 'BEGIN {
    bits = rate; sub(/[a-z]+$/, "", bits); unit = substr(rate, length(bits) + 1)
    bits *= (unit == "gbit" ? 1e9 : unit == "mbit" ? 1e6 : 1e3)
    most = h0 > h1 ? h0 : h1
    printf "%s: %.1f MB vector, %.3f s; host 0 sent %.1f MB, host 1 %.1f MB; the busier link at %s needs %.3f s: %.0f%% of the rate\n",
      op == "ag" ? "MPI_Iallgather" : "MPI_Ireduce_scatter_block", n * 4e-6, s, h0 / 1e6, h1 / 1e6, rate, most * 8 / bits, 100 * most * 8 / bits / s
  }'
done
