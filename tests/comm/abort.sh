# An error on rank 1 ends a 2-rank job promptly (well inside the timeout), non-zero, with rank 1's
# message. Args: mpirun, abort_probe binary.
set -u
MPIRUN="$1"
PROBE="$2"
start=$(date +%s)
out=$(timeout 60 "$MPIRUN" -np 2 --oversubscribe "$PROBE" 2>&1)
rc=$?
elapsed=$(($(date +%s) - start))
echo "$out"
echo "exit code $rc after ${elapsed}s"
if [ $rc -eq 124 ]; then
  echo "FAIL: the job hung (killed by timeout)"
  exit 1
elif [ $rc -eq 0 ]; then
  echo "FAIL: exit code 0, expected non-zero"
  exit 1
elif ! grep -q "rank 1: error: probe failure on purpose (key parallel.dp)" <<<"$out"; then
  echo "FAIL: rank 1's message is missing"
  exit 1
fi
# Alone, the same error exits 1 with a plain message and no Open MPI abort banner.
out=$(ODYSSEY_PROBE_RANK=0 timeout 60 "$PROBE" 2>&1)
rc=$?
echo "$out"
if [ $rc -ne 1 ] || ! grep -q "^odyssey: error: probe failure on purpose" <<<"$out" || grep -qi "MPI_ABORT" <<<"$out"; then
  echo "FAIL: a single rank should exit 1 with a plain message (got exit $rc)"
  exit 1
fi
echo "all checks passed"
