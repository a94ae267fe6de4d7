#!/usr/bin/env bash
# bench/blas_env.sh picks an OpenBLAS core type the CPU can run: AVX-512 kernels only where the CPU has
# AVX-512, never on an AVX2-only CPU (which dies of SIGILL); and this host gets a type its flags allow.
set -euo pipefail
ROOT=$2
source "$ROOT/bench/blas_env.sh"
fail=0
expect() {  # expect WANT VENDOR FLAGS...
  local want=$1
  shift
  local got
  got=$(openblas_coretype_for "$@")
  if [ "$got" != "$want" ]; then
    echo "FAIL: vendor $1, flags '${*:2}': got '$got', want '$want'"
    fail=1
  fi
}
base="fpu sse sse2 ssse3 sse4_1 sse4_2 avx"
epyc="$base fma avx2 bmi2"                                        # AMD EPYC (Zen 2): no AVX-512
skx="$base fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl"  # Skylake-SP
spr="$skx avx512_bf16 amx_bf16 amx_tile"                          # Sapphire Rapids
expect Zen AuthenticAMD $epyc
expect Haswell GenuineIntel $epyc
expect SkylakeX GenuineIntel $skx
expect Cooperlake GenuineIntel $spr
expect SkylakeX AuthenticAMD $skx                 # Zen 4 reports AVX-512: the AVX-512 kernels run
expect Haswell GenuineIntel "$base fma avx2 avx512f" # F alone is not what SKYLAKEX kernels need
expect Sandybridge GenuineIntel "$base"
expect "" GenuineIntel "fpu sse sse2"
expect Zen AuthenticAMD "$epyc avx512_bf16"       # a bf16 flag without AVX-512 changes nothing

# What the benchmarks give PyTorch: BENCH_OPENBLAS_CORETYPE, else the host's type, never a machine-wide
# OPENBLAS_CORETYPE (named in a warning when it differs).
bench_expect() {  # bench_expect WANT WARNS(0|1) ENV...
  local want=$1 warns=$2 got err
  shift 2
  err=$(mktemp)
  got=$(env "$@" bash -c "source '$ROOT/bench/blas_env.sh'; bench_openblas_coretype test" 2>"$err")
  if [ "$got" != "$want" ]; then echo "FAIL: bench_openblas_coretype with $*: got '$got', want '$want'"; fail=1; fi
  if [ "$warns" = 1 ] && ! grep -q "OPENBLAS_CORETYPE=Bogus from the environment is not used" "$err"; then
    echo "FAIL: no warning naming the environment's OPENBLAS_CORETYPE with $*"; fail=1
  fi
  if [ "$warns" = 0 ] && [ -s "$err" ]; then echo "FAIL: unexpected warning with $*: $(cat "$err")"; fail=1; fi
  rm -f "$err"
}
host_type=$(openblas_coretype)
bench_expect "$host_type" 1 OPENBLAS_CORETYPE=Bogus
bench_expect "$host_type" 0 -u OPENBLAS_CORETYPE
bench_expect SkylakeX 1 OPENBLAS_CORETYPE=Bogus BENCH_OPENBLAS_CORETYPE=SkylakeX
bench_expect SkylakeX 0 OPENBLAS_CORETYPE=SkylakeX BENCH_OPENBLAS_CORETYPE=SkylakeX

# This host: the chosen type's ISA is one the host has.
host=$(openblas_coretype)
flags=" $(awk -F': ' '/^flags/ {print $2; exit}' /proc/cpuinfo) "
case "$host" in
  SkylakeX | Cooperlake) [[ "$flags" == *" avx512f "* ]] || { echo "FAIL: $host on a CPU without avx512f"; fail=1; } ;;
  Zen | Haswell) [[ "$flags" == *" avx2 "* ]] || { echo "FAIL: $host on a CPU without avx2"; fail=1; } ;;
esac
echo "host: $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo) -> '${host}'"
[ $fail = 0 ] && echo "blas_env: all choices right"
exit $fail
