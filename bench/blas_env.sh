# Sourced by benchmark scripts: picks the OpenBLAS core type for the CPU the benchmark runs on.
#
# Debian's OpenBLAS (0.3.21) mis-detects some virtualised CPUs, and a core type the CPU cannot run
# (an AVX-512 kernel on an AVX2-only CPU) dies of SIGILL. So the benchmarks set OPENBLAS_CORETYPE
# from the CPU's own flags instead of trusting detection or hard-coding one machine's answer.
#
#   openblas_coretype_for VENDOR FLAGS   prints the core type for a vendor id and /proc/cpuinfo flags
#   openblas_coretype                    the same for this host
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
