#!/usr/bin/env bash
# The first-runs check for a GPU (and soft-RoCE) machine, in two halves (docs/device-check.md):
#   scripts/device-check.sh pack [--no-build] [--build-dir DIR] [pack.py options]
#       here (Debian, no GPU needed): builds the release tree with CUDA (scripts/setup.sh) and
#       packs what the GPU machine needs into build-device/gravac-device-pack.tar.gz
#   scripts/device-check.sh run [--out DIR] [--require-gpu] [--rdma auto|detect|off] [...]
#       there: one command runs every check and writes device-check.json/.txt under --out ($OUT)
# Both halves need python3 (standard library only). `run` without a GPU skips the GPU parts, one
# line each, and exits 0 (1 with --require-gpu).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
here="$root/scripts/device-check"

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
}

py=$(command -v python3 || true)
if [ -z "$py" ]; then
    echo "device-check: python3 is not installed (it runs both halves)" >&2
    exit 1
fi

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
pack)
    build=1
    bdir="$root/build"
    args=()
    while [ $# -gt 0 ]; do
        case "$1" in
        --no-build) build=0 ;;
        --build-dir) bdir=$2; args+=(--build-dir "$2"); shift ;;
        --build-dir=*) bdir=${1#*=}; args+=("$1") ;;
        *) args+=("$1") ;;
        esac
        shift
    done
    if [ $build -eq 1 ]; then
        # the release build of the README; CUDA is on wherever nvcc is found
        "$root/scripts/setup.sh" "$bdir"
    fi
    exec "$py" "$here/pack.py" "${args[@]}"
    ;;
run)
    exec "$py" "$here/run.py" "$@"
    ;;
-h | --help | help)
    usage
    ;;
*)
    usage >&2
    exit 2
    ;;
esac
