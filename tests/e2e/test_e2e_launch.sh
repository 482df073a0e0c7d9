#!/bin/sh
# test_e2e_launch.sh BIN_DIR: gravac-launch end to end. A short job completes with prefixed
# output, worker 0's progress and a summary (authenticated by a generated secret), also with two
# connections per worker and server process; options are
# routed (worker-only and server-only ones do not upset the other programs); a bad option exits
# 2 naming it; a worker killed mid-run makes launch stop the others and exit 1 naming it; SIGINT
# stops everything with 130; GV_SERVERS is launch's (a count), not its children's; a job the
# servers refuse is reported as the servers' failure; launch itself killed with SIGKILL takes its
# children with it; no process is left behind in any case.
set -u
bin=$1
tmp=$(mktemp -d /tmp/gv_e2e_launch_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
export TMPDIR=$tmp

# every process launch started (its direct children) is gone
no_children() {
    sleep 0.3
    for p in $1; do
        if kill -0 "$p" 2>/dev/null; then fail "process $p is still running"; kill -KILL "$p"; fi
    done
}

children_of() {
    pgrep -P "$1" 2>/dev/null | tr '\n' ' '
}

# start_endless SERVERS OUT: an endless job in the background (its pid in $lp), once training
# has started (at most 10 s)
start_endless() {
    "$bin/gravac-launch" --servers "$1" --workers 2 $job --steps 1000000 --insecure >"$2" 2>&1 &
    lp=$!
    for i in $(seq 1 200); do
        grep -q 'training starts' "$2" && break
        sleep 0.05
    done
}

job="--dataset synthetic --synthetic-n 2048 --batch 32 --widths 32 --connect-timeout 20s"

# 1. a short job: rc 0, prefixed lines, progress, summary; options routed to the right programs
out=$tmp/ok.txt
"$bin/gravac-launch" --servers 2 --workers 2 $job --steps 24 --progress-every 8 \
    --eval-every 12 --decision-log "$tmp/dec.jsonl" --method gravac-exp --window 4 \
    >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "short job: rc $rc"
grep -q '^\[server0\] ' "$out" || fail "no [server0] lines"
grep -q '^\[server1\] ' "$out" || fail "no [server1] lines"
grep -q '^\[worker1\] ' "$out" || fail "no [worker1] lines"
grep -q '^\[worker0\] step     24' "$out" || fail "no progress line of worker 0"
grep -q '^\[worker0\] eval step     12' "$out" || fail "no evaluation (--eval-every not routed)"
grep -q 'gravac-launch: done in' "$out" || fail "no summary"
grep -q 'final test accuracy' "$out" || fail "summary without accuracy"
grep -q 'gravac-launch: CF timeline' "$out" || fail "summary without CF timeline"
[ -s "$tmp/dec.jsonl" ] || fail "--decision-log not routed to server 0"
grep -q 'RUNNING WITHOUT AUTHENTICATION' "$out" && fail "the local job ran without a secret"
ls "$tmp" | grep -q '^gravac-launch-' && fail "the run directory was not removed"
[ $fails -eq 0 ] || cat "$out" >&2

# 1b. worker 0 reaches the target accuracy early: everyone stops cleanly at the same iteration
# (the others' deferred pushes are dropped and their BYEs read)
out=$tmp/target.txt
"$bin/gravac-launch" --servers 2 --workers 3 $job --epochs 50 --eval-every 10 \
    --target-accuracy 90 --insecure >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "target accuracy: rc $rc"
grep -q 'target 90.00% reached after' "$out" || fail "target accuracy: not reached"
for w in 1 2; do
    grep -q "server 0: worker $w .* ends after" "$out" || fail "server 0 did not read worker $w's BYE"
done

# 1c. --conns-per-server 2: each server process holds two shards, one per connection to each
# worker, on two threads; the replicas stay equal (every worker checks all four shards every
# iteration)
out=$tmp/lanes.txt
"$bin/gravac-launch" --servers 2 --workers 2 $job --steps 30 --method static --cf 10 \
    --conns-per-server 2 --insecure >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || fail "conns-per-server: rc $rc"
grep -q 'server process 1 holds shards 2..3' "$out" || fail "conns-per-server: no lanes"
[ "$(grep -c 'checksums verified 120 times, 0 mismatches' "$out")" -eq 2 ] ||
    fail "conns-per-server: the workers did not check 4 shards x 30 iterations"
[ $fails -eq 0 ] || cat "$out" >&2

# 2. a bad option: rc 2, named
"$bin/gravac-launch" --lrr 3 >"$tmp/bad.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "bad option: rc $rc"
grep -q -- "--lrr" "$tmp/bad.txt" || fail "bad option not named: $(cat "$tmp/bad.txt")"

# 3. a worker dies: launch stops the rest and names it
out=$tmp/kill.txt
"$bin/gravac-launch" --servers 2 --workers 3 $job --steps 1000000 --insecure >"$out" 2>&1 &
lp=$!
victim=""
for i in $(seq 1 200); do
    for p in $(children_of $lp); do
        if tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q 'gravac-worker.*--rank=1'; then
            victim=$p
        fi
    done
    [ -n "$victim" ] && grep -q 'training starts' "$out" && break
    sleep 0.05
done
kids=$(children_of $lp)
[ -n "$victim" ] || fail "worker 1 not found"
sleep 0.3
[ -n "$victim" ] && kill -KILL "$victim"
wait $lp
rc=$?
[ $rc -eq 1 ] || fail "killed worker: rc $rc"
grep -q "FAILED: worker1" "$out" || { fail "the failed worker is not named"; grep -v "^\[.*\] gravac" "$out" | tail -5 >&2; }
no_children "$kids"

# 4. SIGINT: everything stops, rc 130
out=$tmp/int.txt
start_endless 1 "$out"
kids=$(children_of $lp)
kill -INT $lp
wait $lp
rc=$?
[ $rc -eq 130 ] || fail "SIGINT: rc $rc"
no_children "$kids"

# 5. launch's --servers from its environment variable GV_SERVERS (a count): taken by launch,
# not passed on to the children, whose --servers is a host list
out=$tmp/env.txt
GV_SERVERS=1 GV_WORKERS=2 "$bin/gravac-launch" $job --steps 8 --insecure >"$out" 2>&1
rc=$?
[ $rc -eq 0 ] || { fail "GV_SERVERS=1: rc $rc"; tail -5 "$out" >&2; }
grep -q 'gravac-launch: 1 servers, 2 workers' "$out" || fail "GV_SERVERS/GV_WORKERS not read"

# 6. the servers refuse the job at start (exit 2): launch names a server as the failure, not
# a worker it stopped with SIGTERM itself
out=$tmp/refused.txt
"$bin/gravac-launch" --servers 2 --workers 2 $job --steps 8 --insecure --min-workers 3 \
    >"$out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "refused job: rc $rc"
grep -q 'FAILED: server[01] (exit status 2)' "$out" ||
    { fail "the refusing server is not named first"; grep 'gravac-launch' "$out" >&2; }

# 7. launch itself killed outright (SIGKILL: nothing is forwarded): its servers and workers
# are told by the kernel (SIGTERM) and are gone within a bounded time, not left running
out=$tmp/orphans.txt
start_endless 2 "$out"
kids=$(children_of $lp)
[ "$(echo $kids | wc -w)" -eq 4 ] || fail "SIGKILL: launch has not 4 children: '$kids'"
kill -KILL $lp
wait $lp 2>/dev/null
for i in $(seq 1 100); do
    left=""
    for p in $kids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] || fail "SIGKILL of launch: processes$left still run after 10 s"
for p in $left; do kill -KILL "$p" 2>/dev/null; done

if [ $fails -ne 0 ]; then
    echo "test_e2e_launch: $fails failures" >&2
    exit 1
fi
echo "test_e2e_launch: OK"
