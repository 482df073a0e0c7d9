#!/usr/bin/env bash
# Installs the Debian packages listed in scripts/deps.txt that are missing (idempotent,
# non-interactive, safe to run twice), then configures and builds gravac.
#   scripts/setup.sh [--no-build] [BUILD_DIR [extra cmake args...]]
# BUILD_DIR defaults to build/ (Release, -Werror). Exit status is non-zero on any failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

install_missing() {
    local missing=() pkg
    while read -r pkg; do
        pkg=${pkg%%#*}; pkg=${pkg// /}
        [ -n "$pkg" ] || continue
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$pkg")
    done < "$root/scripts/deps.txt"
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# nvcc is optional; it lives outside PATH on most CUDA installs.
add_cuda_path() {
    if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
        export PATH="/usr/local/cuda/bin:$PATH"
    fi
}

build=1
if [ "${1:-}" = "--no-build" ]; then build=0; shift; fi
install_missing
add_cuda_path
[ $build -eq 1 ] || exit 0

bdir=${1:-build}; shift || true
case "$bdir" in /*) ;; *) bdir="$root/$bdir" ;; esac
cmake -S "$root" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DGV_WERROR=ON "$@" >/dev/null
cmake --build "$bdir" -j "$(nproc)"
