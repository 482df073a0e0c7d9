#!/bin/sh
# test_rdma_bench.sh BENCH: `gravac-bench transport` over RDMA goes through the code path TCP
# uses. --transport auto must run (over rdma with a usable device, else tcp after one warning
# naming the reason) and print the usual table with the backend in use. --transport rdma must
# print the same table with a device; without one it must fail cleanly (exit 1) with the
# reason, and the test then reports SKIP (77), since the RDMA data path did not run.
bench=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; sed 's/^/  | /' "$dir/out" "$dir/err"; exit 1; }

"$bench" transport --transport auto --sizes 64,64K --iters 50 >"$dir/out" 2>"$dir/err" ||
    fail "--transport auto exited $?"
grep -Eq '^ Transport +: (tcp|rdma) ' "$dir/out" || fail "auto: no 'Transport : tcp|rdma' line"
grep -Eq '^ +65536 +50 ' "$dir/out" || fail "auto: no row for 65536 bytes"
if grep -q 'Transport      : tcp' "$dir/out"; then
    grep -q 'using tcp: rdma unavailable: ' "$dir/err" || fail "auto fell back without saying why"
fi

"$bench" transport --transport rdma --sizes 64,64K --iters 50 >"$dir/out" 2>"$dir/err"
rc=$?
if [ $rc -eq 0 ]; then
    grep -Eq '^ Transport +: rdma ' "$dir/out" || fail "rdma: no 'Transport : rdma' line"
    grep -Eq '^ +65536 +50 ' "$dir/out" || fail "rdma: no row for 65536 bytes"
    echo "rdma bench ran"
    exit 0
fi
[ $rc -eq 1 ] || fail "--transport rdma exited $rc (want 0, or 1 without a device)"
grep -q 'rdma unavailable: ' "$dir/err" || fail "rdma failed without the reason"
[ -s "$dir/out" ] && fail "rdma printed a table although it failed"
echo "SKIP: no usable RDMA device: $(sed -n 's/.*rdma unavailable: //p' "$dir/err" | head -1)"
exit 77
