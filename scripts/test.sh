#!/usr/bin/env bash
# The test command: installs what is missing, checks the formatting (clang-format 14, see
# scripts/check-format.sh), builds, and runs the whole ctest suite twice: once in a Release
# build with -Werror, once under AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -R tcp
# GV_TEST_SKIP_SANITIZE=1 skips the second pass (for quick local runs; CI never sets it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

"$root/scripts/setup.sh" --no-build
"$root/scripts/check-format.sh"
"$root/scripts/setup.sh" build
echo "== ctest: release build"
(cd "$root/build" && ctest --output-on-failure -j "$jobs" "$@")

if [ "${GV_TEST_SKIP_SANITIZE:-0}" != 1 ]; then
    # CUDA kernels are compiled and checked by the release pass; the sanitizer pass is host code.
    "$root/scripts/setup.sh" build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DGV_SANITIZE=address,undefined -DGV_ENABLE_CUDA=OFF
    echo "== ctest: AddressSanitizer + UndefinedBehaviorSanitizer build"
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    (cd "$root/build-asan" && ctest --output-on-failure -j "$jobs" "$@")
fi
echo "== all tests passed"
