#!/bin/sh
# test_e2e_evaltime.sh BIN_DIR: worker 0's evaluations (every 10 iterations) are not iteration
# time for the servers' controller. Worker 1 waits for worker 0 while it evaluates, so the
# round's period holds the evaluation; the workers tell the servers how long they were not
# training, and server 0 leaves it out. Checked on server 0's --obs-trace: the iteration after
# each evaluation takes less than half of what the evaluation took (worker 0's metrics: its
# time_s less its train_s), and an evaluation takes at least 10 ms, so the check means
# something. Before the fix each such iteration carried the whole evaluation.
set -u
bin=$1
tmp=$(mktemp -d /tmp/gv_e2e_evaltime_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if ! OMP_NUM_THREADS=1 "$bin/gravac-launch" --servers 1 --workers 2 --insecure --model mlp \
    --method auto --steps 60 --eval-every 10 --obs-trace "$tmp/obs.csv" \
    --metrics-file "$tmp/m-%r.jsonl" >"$tmp/log" 2>&1; then
    echo "FAIL: the job failed" >&2
    tail -5 "$tmp/log" >&2
    exit 1
fi
# the evaluations' durations, in order: the growth of time_s - train_s from one to the next
sed -n 's/.*"type":"eval","step":\([0-9]*\),.*"time_s":\([0-9.e+-]*\),"train_s":\([0-9.e+-]*\),.*/\1 \2 \3/p' \
    "$tmp/m-0.jsonl" >"$tmp/evals"
# iteration (0-based) and its time: compute + compression + the rest of the round's period
awk -F, 'NR > 1 { print $1, $7 + $8 + $9 }' "$tmp/obs.csv" >"$tmp/times"
awk -v times="$tmp/times" '
    BEGIN { while ((getline l < times) > 0) { split(l, f, " "); t[f[1]] = f[2] } }
    {
        dur = ($2 - $3) - prev; prev = $2 - $3; n++
        if ($1 >= 60) next # the last evaluation: no iteration after it
        checked++
        if (dur < 0.010) { printf "FAIL: the evaluation at step %d took only %.4f s\n", $1, dur; bad++ }
        if (!($1 in t)) { printf "FAIL: no iteration %d in the trace\n", $1; bad++; next }
        if (t[$1] >= 0.5 * dur) {
            printf "FAIL: iteration %d took %.4f s after an evaluation of %.4f s\n", $1, t[$1], dur
            bad++
        } else
            printf "ok: iteration %d: %.4f s after an evaluation of %.4f s\n", $1, t[$1], dur
    }
    END {
        if (checked < 5) { printf "FAIL: only %d evaluations checked\n", checked; bad++ }
        exit bad > 0
    }' "$tmp/evals"
