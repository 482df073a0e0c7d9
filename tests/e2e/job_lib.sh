# job_lib.sh: shell helpers of the launcher tests (test_e2e_mpirun.sh, test_e2e_slurm.sh),
# sourced, not run. A job here is 2 servers and 3 workers on loopback whose files go to $tmp:
# dumps server<r>.bin / worker<r>.bin (--dump-params) and worker<r>.jsonl (--metrics-file).
# The caller sets bin, tmp and fails (a counter), and defines fail().

# The options every process of a test job takes (the rank comes from the launcher).
# $1: iterations; $2: the rendezvous directory.
job_common() {
    echo "--dataset synthetic --synthetic-n 2048 --batch 16 --widths 32 --steps $1" \
         "--method gravac-exp --window 25 --epsilon 0.3" \
         "--num-servers 2 --rendezvous-dir $2 --insecure --connect-timeout 20s" \
         "--heartbeat-interval 200ms --peer-timeout 1500ms"
}

# The last iteration worker $1 recorded in its metrics file (-1: none yet).
job_last_iter() {
    local f=$tmp/worker$1.jsonl it
    [ -s "$f" ] || { echo -1; return; }
    it=$(tail -c 4096 "$f" | grep -o '"type":"iter","iter":[0-9]*' | tail -n 1 | grep -o '[0-9]*$')
    echo "${it:--1}"
}

# Waits until worker $1 has recorded iteration $2, at most $3 seconds; false on timeout.
job_wait_iter() {
    local end=$(($(date +%s) + $3))
    while [ "$(date +%s)" -le $end ]; do
        [ "$(job_last_iter "$1")" -ge "$2" ] && return 0
        sleep 0.05
    done
    return 1
}

# Every worker's final parameters equal the servers' shards concatenated (bit for bit), and
# every worker logged the same compression-factor sequence, with at least one change.
job_check_replicas() {
    local w n
    cat "$tmp/server0.bin" "$tmp/server1.bin" >"$tmp/shards.bin" 2>/dev/null ||
        fail "a server wrote no --dump-params file"
    [ -s "$tmp/shards.bin" ] || fail "the servers' dumps are empty"
    for w in 0 1 2; do
        cmp -s "$tmp/shards.bin" "$tmp/worker$w.bin" ||
            fail "worker $w's parameters differ from the servers' shards"
        grep '"type":"iter"' "$tmp/worker$w.jsonl" 2>/dev/null |
            grep -o '"level":"[a-z]*","cf":[^,]*' >"$tmp/cf$w"
    done
    n=$(wc -l <"$tmp/cf0")
    [ "$n" -gt 0 ] || fail "worker 0 recorded no iteration"
    for w in 1 2; do
        cmp -s "$tmp/cf0" "$tmp/cf$w" || fail "worker $w's CF sequence differs from worker 0's"
    done
    [ "$(sort -u "$tmp/cf0" | wc -l)" -ge 2 ] || fail "the CF never changed (GraVAC did not run)"
}

# The pid of the gravac program of this test (its command line names $tmp) whose environment
# has $1=$2 (the launcher's rank variable).
job_pid_with_env() {
    local p
    for p in $(pgrep -f -- "gravac-.*$tmp/"); do
        if tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "$1=$2"; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
