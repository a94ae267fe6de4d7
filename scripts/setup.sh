#!/usr/bin/env bash
# Installs the Debian 12 packages Odyssey needs (idempotent: skips what is present).
#   bash scripts/setup.sh            what building the odyssey binary and running it need
#   bash scripts/setup.sh --test     also GoogleTest, clang-format, python3, and iproute2, util-linux
#                                    and bc (the test suite; tests/multihost's namespace cluster)
#   bash scripts/setup.sh --plot     also python3-matplotlib (the demo's loss plot)
#   bash scripts/setup.sh --torch    also PyTorch, numpy, OpenBLAS, tcmalloc (bench/compare.sh, reference data)
#   bash scripts/setup.sh --bench    also jq (bench/bf16_speed.sh, bench/plan_validate.sh read metrics with it)
#   bash scripts/setup.sh --fuzz     also clang 14 and its runtime libraries (libFuzzer; scripts/fuzz.sh)
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git ca-certificates
          libdnnl-dev libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev libxxhash-dev libpcre2-dev
          libopenmpi-dev openmpi-bin
          # Debian's dnnl-config.cmake calls find_package(OpenCL) unconditionally; libdnnl-dev only
          # Recommends the package that provides it, so --no-install-recommends would leave it out.
          ocl-icd-opencl-dev)
for arg in "$@"; do
  case "$arg" in
    --test) packages+=(libgtest-dev libgmock-dev clang-format python3 iproute2 util-linux bc) ;;
    --plot) packages+=(python3 python3-matplotlib) ;;
    --bench) packages+=(jq) ;;
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    # PyTorch needs an optimized BLAS (Debian's reference BLAS is 100x slower).
    # tcmalloc: bench/torch_env.sh preloads it for PyTorch (glibc's page faults dominated its step).
    --torch) packages+=(python3 python3-torch python3-numpy libopenblas0-openmp libtcmalloc-minimal4) ;;
    *)
      echo "setup: unknown option '$arg' (expected --test, --plot, --torch, --bench or --fuzz)" >&2
      exit 1
      ;;
  esac
done
# npm fetches the corpora and vocabularies; a Node.js installed outside apt already brings it
# (apt's would conflict).
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
