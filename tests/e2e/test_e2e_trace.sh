#!/bin/sh
# test_e2e_trace.sh BIN_DIR: --trace through the programs. gravac-launch passes --trace with %n
# to 2 gravac-server and 2 gravac-worker processes; each writes a valid Chrome trace (JSON, the
# spans of its role for every iteration); gravac-trace merges them into one trace with one
# process lane per file and draws it; the files' directory is made; a file that cannot be
# created fails the process with status 1 before the job starts. (test_trace checks the files' contents in detail.)
set -eu
bin=$1
tmp=$(mktemp -d /tmp/gv_e2e_trace_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_e2e_trace: $*" >&2; exit 1; }
job="--dataset synthetic --synthetic-n 1024 --batch 32 --widths 32 --steps 12 --method static
--cf 10 --connect-timeout 20s --insecure --quiet"

# shellcheck disable=SC2086
"$bin/gravac-launch" --servers 2 --workers 2 $job --trace "$tmp/tl/%n.json" > "$tmp/out" 2>&1 ||
    fail "job: $(tail -5 "$tmp/out")"
for f in server0 server1 worker0 worker1; do
    [ -s "$tmp/tl/$f.json" ] || fail "no $f.json: $(ls "$tmp/tl")"
done
python3 - "$tmp/tl" <<'PY' || fail "trace files"
import json, sys
want = {"server": {"aggregate", "add", "decide", "update"},
        "worker": {"compute", "compress", "push", "wait", "apply"}}
for name in ("server0", "server1", "worker0", "worker1"):
    ev = json.load(open(f"{sys.argv[1]}/{name}.json"))
    role = name[:-1]
    x = [e for e in ev if e["ph"] == "X"]
    assert {e["name"] for e in x} == want[role], (name, {e["name"] for e in x})
    iters = {e["args"]["iter"] for e in x}
    assert iters == set(range(12)), (name, sorted(iters))
    assert any(e["name"] == "process_name" and e["args"]["name"] == f"{role} {name[-1]}"
               for e in ev)
PY
"$bin/gravac-trace" merge -o "$tmp/job.json" "$tmp"/tl/*.json || fail "merge"
python3 -c "
import json, sys
ev = json.load(open('$tmp/job.json'))
assert {e['pid'] for e in ev if e['ph'] == 'X'} == {1, 2, 3, 4}
" || fail "merged lanes"
"$bin/gravac-trace" svg --iters 5:6 -o "$tmp/t.svg" "$tmp/job.json" || fail "svg"
grep -q '</svg>' "$tmp/t.svg" || fail "svg file"

# a file that cannot be created (its directory would be under a file): status 1, named
: > "$tmp/plain"
rc=0
# shellcheck disable=SC2086
"$bin/gravac-server" --servers 127.0.0.1:1 --rank 0 --num-workers 1 $job \
    --trace "$tmp/plain/x/%n.json" > "$tmp/bad" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "an uncreatable trace file: exit status $rc, want 1"
grep -q "plain/x" "$tmp/bad" || fail "no error naming the trace file: $(cat "$tmp/bad")"
echo "test_e2e_trace: ok"
