#!/bin/sh
# bench_smoke.sh GRAVAC_BENCH: `gravac-bench transport` end to end, briefly: every mode, the
# three output formats, several connections and windows, server and client as two processes,
# and exit status 2 on usage errors. Numbers are not judged here (that is the benchmark's job),
# only that each measured row is complete and positive.
set -eu
bench=$1
tmp=$(mktemp -d)
srv=""
cleanup() {
    [ -n "$srv" ] && kill "$srv" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "bench_smoke: $*" >&2; exit 1; }

# CSV: a header and one row per size, goodput and p50 latency positive
"$bench" transport --mode stream --sizes 8,64K,1M --iters 50 --warmup 5 --csv > "$tmp/s.csv"
[ "$(wc -l < "$tmp/s.csv")" -eq 4 ] || fail "stream csv: want 4 lines, got $(cat "$tmp/s.csv")"
head -n 1 "$tmp/s.csv" | grep -q '^transport,mode,conns,window' || fail "csv header"
awk -F, 'NR > 1 && !($10 > 0 && $13 > 0 && $8 == 50) { exit 1 }' "$tmp/s.csv" || fail "stream rows: $(cat "$tmp/s.csv")"

# the raw-socket baseline (loopback only)
"$bench" transport --mode rawstream --sizes 4K,1M --iters 50 --csv > "$tmp/r.csv"
[ "$(wc -l < "$tmp/r.csv")" -eq 3 ] || fail "rawstream csv: $(cat "$tmp/r.csv")"
awk -F, 'NR > 1 && !($10 > 0 && $8 == 50) { exit 1 }' "$tmp/r.csv" || fail "rawstream rows"

# JSON for the round-trip modes, with several connections and a window
for m in pingpong pushpull; do
    "$bench" transport --mode $m --sizes 64,4K --iters 100 --window 4 --conns 2 --json > "$tmp/$m.json"
    grep -q '"ok": true' "$tmp/$m.json" || fail "$m json: $(cat "$tmp/$m.json")"
    [ "$(grep -c '"bytes":' "$tmp/$m.json")" -eq 2 ] || fail "$m json rows"
done

# the table, bounded by duration
"$bench" transport --mode pingpong --sizes 64 --duration 0.2 > "$tmp/t.txt"
grep -q 'gravac transport benchmark: pingpong' "$tmp/t.txt" || fail "banner"
grep -q 'RTT/2' "$tmp/t.txt" || fail "latency kind in banner"

# server and client as two processes; the server exits when the session ends
: > "$tmp/srv.err" # exists before the background job opens it
"$bench" transport --server --bind 127.0.0.1 --port 0 2> "$tmp/srv.err" &
srv=$!
port=""
for _ in $(seq 50); do
    port=$(sed -n 's/.*port \([0-9][0-9]*\)$/\1/p' "$tmp/srv.err" || true)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || fail "server did not report its port: $(cat "$tmp/srv.err")"
"$bench" transport --client "127.0.0.1:$port" --mode stream --sizes 4K --iters 100 --csv > "$tmp/c.csv"
wait "$srv" || fail "server exit status"
srv=""
[ "$(wc -l < "$tmp/c.csv")" -eq 2 ] || fail "client csv"

# usage errors exit 2
for bad in "--window 0" "--sizes x" "--mode nope" "--bogus" "--client nohostport" "--json --csv" \
    "--mode rawstream --server"; do
    rc=0
    # shellcheck disable=SC2086
    "$bench" transport $bad > /dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "'$bad' exited $rc, want 2"
done
"$bench" transport --help | grep -q -- '--mode' || fail "help"
echo "bench_smoke: ok"
