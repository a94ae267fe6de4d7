#!/usr/bin/env bash
# Installs the Debian 12 packages Odyssey builds and tests with (idempotent: skips when present).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config git ca-certificates python3
          libdnnl-dev libtomlplusplus-dev libcli11-dev libfmt-dev nlohmann-json3-dev libxxhash-dev libpcre2-dev
          libgtest-dev libgmock-dev libbenchmark-dev libopenmpi-dev openmpi-bin clang-format)
# The benchmark against PyTorch needs an optimized BLAS for it (Debian's reference BLAS is 100x slower).
if [ "${1:-}" = "--with-python" ]; then packages+=(libopenblas0-openmp); fi
# Extra packages for plots and reference data (python3-matplotlib, python3-torch) with --with-python.
if [ "${1:-}" = "--with-python" ]; then packages+=(python3-matplotlib python3-numpy python3-torch); fi

# npm fetches the corpora; a Node.js installed outside apt already brings it (apt's would conflict).
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
