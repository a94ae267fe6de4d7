#!/usr/bin/env bash
# PyTorch's attention on bench_attention's shapes (bench/torch_attention.py), same threads, in the
# environment bench/torch_env.sh sets up for PyTorch (Debian's OpenBLAS with the CPU's core type,
# tcmalloc). OMP_WAIT_POLICY passive as in compare.sh. A benchmark, never a runtime dependency.
#   THREADS=2 bash bench/torch_attention.sh [--T 1024,4096] [--D 64,128]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=${THREADS:-2}
PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
source "$ROOT/bench/torch_env.sh"
torch_env_setup torch_attention
TORCH_ALLOCATOR=$TORCH_MALLOC_USED torch_env "$TORCH_CORETYPE" "$PYTHON" "$ROOT/bench/torch_attention.py" "$@"
