# Sourced by benchmark scripts: picks the OpenBLAS core type for the CPU the benchmark runs on.
#
# Debian's OpenBLAS (0.3.21) mis-detects some virtualised CPUs, and a core type the CPU cannot run
# (an AVX-512 kernel on an AVX2-only CPU) dies of SIGILL. So the benchmarks set OPENBLAS_CORETYPE
# from the CPU's own flags instead of trusting detection or hard-coding one machine's answer.
#
#   openblas_coretype_for VENDOR FLAGS   prints the core type for a vendor id and /proc/cpuinfo flags
#   openblas_coretype                    the same for this host
#   bench_openblas_coretype NAME         the type a benchmark gives PyTorch (see below); NAME for its warning
#
# AVX-512 (F, BW, VL, DQ: what OpenBLAS's SKYLAKEX kernels use) -> SkylakeX, with BF16 -> Cooperlake;
# AVX2 + FMA -> Zen on AMD, Haswell elsewhere; AVX -> Sandybridge; older -> empty (leave detection).

openblas_coretype_for() {  # VENDOR FLAGS...
  local vendor=$1
  shift
  local flags=" $* "
  has() { [[ "$flags" == *" $1 "* ]]; }
  if has avx512f && has avx512bw && has avx512vl && has avx512dq; then
    if has avx512_bf16; then echo Cooperlake; else echo SkylakeX; fi
  elif has avx2 && has fma; then
    if [ "$vendor" = AuthenticAMD ] || [ "$vendor" = HygonGenuine ]; then echo Zen; else echo Haswell; fi
  elif has avx; then
    echo Sandybridge
  fi
}

openblas_coretype() {
  local vendor flags
  vendor=$(awk -F': ' '/^vendor_id/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
  flags=$(awk -F': ' '/^flags/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
  openblas_coretype_for "$vendor" $flags
}

# The core type the benchmarks give PyTorch's OpenBLAS: BENCH_OPENBLAS_CORETYPE when set, else this
# host's. An OPENBLAS_CORETYPE already in the environment is not used, and a warning names it when it
# differs: machines here export one machine-wide (Haswell on an AVX-512 AMD EPYC Zen 5, where it gave
# PyTorch's 1024^3 matmul 155 GFLOP/s against 273 with Cooperlake), which would make the baseline
# slower than the CPU allows and flatter every ratio.
bench_openblas_coretype() {  # NAME
  local chosen=${BENCH_OPENBLAS_CORETYPE:-$(openblas_coretype)}
  if [ -n "${OPENBLAS_CORETYPE:-}" ] && [ "$OPENBLAS_CORETYPE" != "$chosen" ]; then
    echo "$1: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment is not used; PyTorch's OpenBLAS gets '${chosen:-its own detection}' (BENCH_OPENBLAS_CORETYPE chooses another)" >&2
  fi
  echo "$chosen"
}
