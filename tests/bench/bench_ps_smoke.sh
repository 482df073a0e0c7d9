#!/bin/sh
# bench_ps_smoke.sh GRAVAC_BENCH GRAVAC_TRACE: `gravac-bench ps` end to end, briefly: 2 servers
# and 2 workers, dense and compressed, the three output formats, the breakdown, the per-process
# timelines, and exit status 2 on usage errors. Speed is not judged (that is the benchmark's
# job), only the output's shape and its internal consistency.
set -eu
bench=$1
trace=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "bench_ps_smoke: $*" >&2; exit 1; }

# CSV: a header and one row per (size, CF), each complete and consistent
"$bench" ps --workers 2 --servers 2 --sizes 4K,64K --cf 1,10 --iters 20 --warmup 2 --breakdown \
    --csv > "$tmp/p.csv"
[ "$(wc -l < "$tmp/p.csv")" -eq 5 ] || fail "csv: want 5 lines, got $(cat "$tmp/p.csv")"
head -n 1 "$tmp/p.csv" | grep -q '^workers,servers,method,compressor,bytes,numel,cf' || fail "csv header"
# columns: 1 workers 2 servers 3 method 5 bytes 6 numel 7 cf 8 cf_mean 9 iters 10 seconds
# 11 up 12 down 13 gbps 14 eff_gbps 15-19 rtt min p50 p99 p99.9 max 20 pp_bytes 21 pp_gbps
# 22 pp_p50 23 ratio 24.. the phases (compute compress push wait apply aggregate add decide
# update), then the CPU of a PS round and of the baseline's equivalent (ms)
awk -F, 'NR > 1 {
    bad = !($1 == 2 && $2 == 2 && $9 == 20 && $10 > 0 && $13 > 0 && $11 > 0 && $12 > 0)
    bad = bad || !($5 == 4 * $6 && ($5 - (NR < 4 ? 4096 : 65536)) ^ 2 < 10000)
    bad = bad || !($15 > 0 && $15 <= $16 && $16 <= $17 && $17 <= $18 && $18 <= $19)
    bad = bad || !($20 > 0 && $21 > 0 && $22 > 0 && $23 > 0)
    bad = bad || !($25 > 0 && $26 > 0 && $26 <= $25 && $29 > 0 && $32 > 0)
    bad = bad || !(NF == 34 && $33 > 0 && $34 > 0)
    # the dense-equivalent goodput: 2 x bytes x 2 workers x rounds over the same time
    bad = bad || !(($14 - 4 * $5 * $9 * 8 / $10 / 1e9) ^ 2 < 1e-4 * $14 ^ 2)
    if ($7 == 1) # dense: the method, both ways the same bytes, the baseline at the value size
        bad = bad || !($3 == "dense" && $8 == 1 && ($11 - $12) ^ 2 < 1e-6 && $20 == $5 &&
                       ($14 - $13) ^ 2 < 1e-4 * $13 ^ 2)
    else         # CF 10: fewer bytes pushed than the model, and the baseline at those
        bad = bad || !($3 == "static" && $8 == 10 && $20 < $5 && $14 > $13)
    if (bad) { print "bad row: " $0; exit 1 }
}' "$tmp/p.csv" || fail "rows"

# sparse values as fp16 (the default) against f32 (--no-fp16): the mean payload per worker,
# round and direction (column 20) of a CF 10 round falls to between 0.5 and 0.7 of f32's
# (2-byte values against 4, the same delta-coded indices)
"$bench" ps --workers 2 --servers 2 --sizes 64K --cf 10 --iters 10 --warmup 1 --csv \
    > "$tmp/h.csv"
"$bench" ps --workers 2 --servers 2 --sizes 64K --cf 10 --iters 10 --warmup 1 --csv \
    --no-fp16 > "$tmp/f.csv"
h=$(awk -F, 'NR == 2 { print $20 }' "$tmp/h.csv")
f=$(awk -F, 'NR == 2 { print $20 }' "$tmp/f.csv")
awk -v h="$h" -v f="$f" 'BEGIN { exit !(h > 0 && f > 0 && h > 0.5 * f && h < 0.7 * f) }' ||
    fail "fp16 payload $h bytes against f32's $f"
"$bench" ps --sizes 64K --cf 10 --iters 5 --warmup 1 --no-fp16 --no-baseline \
    | grep -q 'static, topk, f32' || fail "banner: values f32"

# JSON: valid, one result, the baseline and its ratio present
"$bench" ps --sizes 16K --iters 10 --warmup 1 --repeats 2 --json > "$tmp/p.json"
python3 - "$tmp/p.json" <<'EOF' || fail "json: $(cat "$tmp/p.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["benchmark"] == "ps" and d["ok"] is True and len(d["results"]) == 1
r = d["results"][0]
assert r["iters"] == 20 and r["gbps"] > 0 and r["rtt_us"]["p50"] > 0
assert r["pushpull"]["bytes"] == r["bytes"] and len(r["ratios"]) == 2 and r["ratio"] > 0
assert r["cpu_ms"] > 0 and r["pp_cpu_ms"] > 0
EOF

# the table, an adaptive method, and each process's timeline
"$bench" ps --workers 2 --sizes 8K --cf 20 --method gravac-exp --gravac-window 5 --iters 15 \
    --warmup 1 --no-baseline --trace "$tmp/tl" > "$tmp/t.txt" 2> "$tmp/t.err" \
    || fail "gravac-exp run: $(cat "$tmp/t.err")"
grep -q 'gravac parameter-server benchmark' "$tmp/t.txt" || fail "banner"
# the job is exactly the rounds the workers run: they end it, nobody leaves it early (with one
# round more, a worker's BYE before worker 0's aborted the job after the results)
grep -Eq 'left the job|aborting the job' "$tmp/t.err" && fail "the job was aborted: $(cat "$tmp/t.err")"
grep -q 'Baseline *: none' "$tmp/t.txt" || fail "banner baseline"
[ "$(ls "$tmp/tl" | wc -l)" -eq 3 ] || fail "timelines: $(ls "$tmp/tl")"
"$trace" merge -o "$tmp/job.json" "$tmp"/tl/*.json || fail "merge"
"$trace" stats "$tmp/job.json" | grep -q 'server 0 *update' || fail "stats of the timeline"

# usage errors exit 2
for bad in "--workers 0" "--sizes 10" "--cf 0.5" "--method nope" "--bogus" "--json --csv" \
    "--repeats 0" "--window 0"; do
    rc=0
    # shellcheck disable=SC2086
    "$bench" ps $bad > /dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "'$bad' exit status $rc, want 2"
done
echo "bench_ps_smoke: ok"
