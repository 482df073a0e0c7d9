#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs a local cluster on loopback that
# trains a model on Fashion-MNIST with GraVAC, showing progress and a summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh" build
if [ ! -x "$root/build/bin/gravac-launch" ]; then
    echo "gravac: $root/build/bin/gravac-launch is missing after the build; see the build output above" >&2
    exit 1
fi
# The job's defaults are in scripts/main-job.ini; a later --config or any option overrides them.
exec "$root/build/bin/gravac-launch" --config "$root/scripts/main-job.ini" "$@"
