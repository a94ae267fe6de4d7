# Sourced by the benchmarks that run PyTorch (compare.sh, torch_attention.sh): the environment PyTorch
# runs in, set up as a careful CPU user sets it up, so that a ratio measures the engines and not
# PyTorch's defaults on this machine.
#
# - BLAS: Debian's OpenBLAS (libopenblas0-openmp, else -pthread) ahead of whatever libblas.so.3 is
#   (the reference BLAS runs under 1 GFLOP/s), with OPENBLAS_CORETYPE from the CPU's flags
#   (blas_env.sh: bench_openblas_coretype).
# - Allocator: tcmalloc (libtcmalloc-minimal4) preloaded. PyTorch allocates every op's output afresh
#   and glibc returns each freed block above 32 MiB to the OS, so every large tensor's pages fault in
#   again on every op. On the AMD EPYC Zen 5 VMs, where a page fault costs ~7 us, that made an add of
#   two [2048, 50257] tensors 842 ms instead of 15 ms with a preallocated output, the LM head's matmul
#   1134 ms instead of 282, and the 4-layer, 512-wide model at T = 512 train at 235 tokens/s instead of
#   685. jemalloc with its defaults unmaps such blocks too (measured: no better than glibc).
#   TORCH_MALLOC=system keeps glibc's allocator.
#
#   torch_env_setup NAME          chooses (warnings on stderr, prefixed NAME); sets TORCH_BLAS_DIR,
#                                 TORCH_CORETYPE, TORCH_MALLOC_USED
#   torch_env CORETYPE CMD...     runs CMD there ("" for CORETYPE leaves the core type to OpenBLAS)

source "$(dirname "${BASH_SOURCE[0]}")/blas_env.sh"

torch_env_setup() {  # NAME
  local name=$1 d
  TORCH_BLAS_DIR=""
  for d in /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/x86_64-linux-gnu/openblas-pthread; do
    if [ -f "$d/libblas.so.3" ]; then TORCH_BLAS_DIR=$d; break; fi
  done
  if [ -z "$TORCH_BLAS_DIR" ]; then
    echo "$name: WARNING: no OpenBLAS found; PyTorch will use $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo '?')" >&2
    echo "$name:          (the reference BLAS is far slower: apt-get install libopenblas0-openmp for a fair comparison)" >&2
  fi
  TORCH_CORETYPE=$(bench_openblas_coretype "$name")
  TORCH_MALLOC_LIB=""
  TORCH_MALLOC_USED=system
  if [ "${TORCH_MALLOC:-tcmalloc}" = tcmalloc ]; then
    for d in /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 /usr/lib/x86_64-linux-gnu/libtcmalloc.so.4; do
      if [ -f "$d" ]; then TORCH_MALLOC_LIB=$d; TORCH_MALLOC_USED=tcmalloc; break; fi
    done
    [ -n "$TORCH_MALLOC_LIB" ] || echo "$name: WARNING: no tcmalloc (apt-get install libtcmalloc-minimal4); PyTorch gets glibc's allocator, whose page faults can dominate its step" >&2
  elif [ "$TORCH_MALLOC" != system ]; then
    echo "$name: TORCH_MALLOC=$TORCH_MALLOC: expected tcmalloc or system" >&2
    return 2
  fi
}

torch_env() {  # CORETYPE CMD...
  local coretype=$1
  shift
  env -u OPENBLAS_CORETYPE \
    ${TORCH_BLAS_DIR:+LD_LIBRARY_PATH=$TORCH_BLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} \
    ${TORCH_MALLOC_LIB:+LD_PRELOAD=$TORCH_MALLOC_LIB${LD_PRELOAD:+:$LD_PRELOAD}} \
    ${coretype:+OPENBLAS_CORETYPE=$coretype} OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS" "$@"
}
