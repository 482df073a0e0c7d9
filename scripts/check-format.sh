#!/usr/bin/env bash
# Fails (exit 1) when a tracked C, CUDA or header file is not formatted as .clang-format says,
# naming the files and showing the first differences. clang-format 14 (Debian clang-format-14)
# is the formatter in force: other versions format some constructs differently.
#   scripts/check-format.sh          check
#   scripts/check-format.sh --fix    format the files in place
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cf=""
for c in clang-format-14 clang-format; do
    if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then
        cf=$c
        break
    fi
done
if [ -z "$cf" ]; then
    echo "check-format: clang-format 14 not found (scripts/setup.sh installs clang-format-14)" >&2
    exit 1
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
    "$cf" -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
        bad+=("$f")
    fi
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "check-format: ${#bad[@]} file(s) not formatted (scripts/check-format.sh --fix):" >&2
    for f in "${bad[@]}"; do
        echo "  $f" >&2
        "$cf" "$f" | diff -u "$f" - | head -20 >&2 || true
    done
    exit 1
fi
echo "check-format: ${#files[@]} files formatted ($cf)"
