#!/usr/bin/env bash
# PyTorch's attention on bench_attention's shapes (bench/torch_attention.py), same threads, with
# PyTorch's matmuls on Debian's OpenBLAS (libopenblas0-openmp, else -pthread) with OPENBLAS_CORETYPE
# from this CPU's flags (bench/blas_env.sh; BENCH_OPENBLAS_CORETYPE chooses another). OMP_WAIT_POLICY
# passive as in compare.sh. A benchmark, never a runtime dependency.
#   THREADS=2 bash bench/torch_attention.sh [--T 1024,4096] [--D 64,128]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
source "$ROOT/bench/blas_env.sh"
CORETYPE=$(bench_openblas_coretype torch_attention)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
BLAS_DIR=""
for d in /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/openblas-pthread; do
  if [ -f "$d/libblas.so.3" ]; then BLAS_DIR=$d; break; fi
done
[ -n "$BLAS_DIR" ] || echo "torch_attention: WARNING: no OpenBLAS; PyTorch gets the system libblas" >&2
exec env -u OPENBLAS_CORETYPE ${BLAS_DIR:+LD_LIBRARY_PATH=$BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} \
  ${CORETYPE:+OPENBLAS_CORETYPE=$CORETYPE} OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" \
  "$PYTHON" "$ROOT/bench/torch_attention.py" "$@"
