#!/bin/bash
# test_e2e_mpirun.sh BIN_DIR job|kill|stop: gravac under Open MPI's mpirun, as docs/operations.md
# deploys it (MPMD: `mpirun -np 2 gravac-server ... : -np 3 gravac-worker ...`; the ranks and
# the worker count come from OMPI_COMM_WORLD_RANK / _SIZE, the servers' addresses from a
# rendezvous directory, ports picked by the kernel).
#   job   the job runs to completion: mpirun exits 0, each process took the rank its place in
#         the command gave it, every worker's parameters equal the servers' shards, the workers
#         saw the same CF sequence
#   kill  SIGKILL worker 1 (world rank 3) mid-run: mpirun ends the job within a bound and exits
#         1 (a gravac process's "job failed" status reached it first) or 137 (it saw the
#         killed rank first), with its message; the servers name the dead worker; nothing is
#         left running
#   stop  SIGTERM to server 1 with `--mca orte_abort_on_non_zero_status 0`: every process
#         stops on request at one iteration (exit 3), both shards' final checkpoints complete
#         (mpirun, left out of the ending, exits 0)
# SKIP (77) without mpirun (scripts/setup.sh installs openmpi-bin).
set -u
bin=$(cd "$1" && pwd)
scenario=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/job_lib.sh"

if ! command -v mpirun >/dev/null 2>&1; then
    echo "test_e2e_mpirun: SKIP: mpirun is not installed (scripts/setup.sh installs openmpi-bin)"
    exit 77
fi
tmp=$(mktemp -d /tmp/gv_e2e_mpirun_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mp=""
cleanup() {
    if [ -n "$mp" ]; then
        # mpirun runs in a session of its own (setsid below): its ranks are in it too
        kill -TERM "$mp" 2>/dev/null
        for _ in $(seq 1 40); do kill -0 "$mp" 2>/dev/null || break; sleep 0.05; done
        pkill -KILL -s "$mp" 2>/dev/null
        wait "$mp" 2>/dev/null
    fi
    if [ $fails -eq 0 ]; then rm -rf "$tmp"; else echo "test_e2e_mpirun: files kept in $tmp" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# CI runs as root (Open MPI refuses root without these), on 2 cores for 5 processes
# (--oversubscribe), and one host: the isolated launcher forks the ranks itself (no ssh, and
# no srun when the test happens to run inside a Slurm allocation).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
mkdir "$tmp/rdv"

# start_job ITERATIONS [more options for every process]: mpirun in the background (pid in
# $mp), its output in $tmp/out; mpirun's own options in the array mca
mca=()
start_job() {
    local common
    common=$(job_common "$1" "$tmp/rdv")
    shift
    common="$common $*"
    # shellcheck disable=SC2086 # the option strings are split on purpose
    setsid mpirun "${mca[@]}" --oversubscribe --timeout 100 \
        -np 2 "$bin/gravac-server" $common --bind 127.0.0.1:0 \
        --dump-params "$tmp/server%r.bin" \
        : -np 3 "$bin/gravac-worker" $common --quiet --metrics-file "$tmp/worker%r.jsonl" \
        --dump-params "$tmp/worker%r.bin" >"$tmp/out" 2>&1 &
    mp=$!
}

# wait_job SECONDS: waits for mpirun; its exit status in $rc (-1: still running, killed)
wait_job() {
    local end=$(($(date +%s) + $1))
    rc=-1
    while kill -0 "$mp" 2>/dev/null && [ "$(date +%s)" -le $end ]; do sleep 0.02; done
    if kill -0 "$mp" 2>/dev/null; then
        fail "mpirun still running after $1 s"
        return
    fi
    wait "$mp"
    rc=$?
    mp=""
}

case $scenario in
job)
    start_job 600
    wait_job 100
    [ "$rc" -eq 0 ] || fail "mpirun exited $rc"
    for s in 0 1; do
        want="gravac-server $s of 2 (rank from OMPI_COMM_WORLD_RANK=$s), 3 workers"
        grep -q "gravac\[server$s\] .* $want" "$tmp/out" ||
            fail "server $s did not take its rank from OMPI_COMM_WORLD_RANK"
        grep -q "server $s: job finished after 600 iterations" "$tmp/out" ||
            fail "server $s did not finish the job"
    done
    grep -q "gravac-worker 0 of 3 (rank from OMPI_COMM_WORLD_RANK=2 - 2 servers" "$tmp/out" ||
        fail "worker 0 is not world rank 2"
    for w in 1 2; do
        grep -q "gravac\[worker$w\] .* worker $w of 3: in sync with 2 servers" "$tmp/out" ||
            fail "worker $w did not join"
    done
    grep -q "checksums verified .* 0 mismatches" "$tmp/out" || fail "no checksum summary"
    job_check_replicas
    ;;
kill)
    start_job 100000000
    job_wait_iter 0 200 30 || fail "worker 0 did not reach iteration 200 within 30 s"
    victim=$(job_pid_with_env OMPI_COMM_WORLD_RANK 3)
    [ -n "$victim" ] || fail "worker 1 (world rank 3) not found"
    t0=$(date +%s%N)
    [ -n "$victim" ] && kill -KILL "$victim"
    wait_job 20
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    echo "test_e2e_mpirun: mpirun ended $secs s after worker 1 was killed, exit status $rc"
    # a killed peer resets its connections: detected at once, not after --peer-timeout
    awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "the job took $secs s to end"
    case $rc in
    1)
        grep -q "mpirun detected that one or more processes exited with non-zero status" \
            "$tmp/out" || fail "exit 1 without mpirun's non-zero-status message"
        grep -q "Exit code: *1$" "$tmp/out" || fail "mpirun does not report exit code 1"
        ;;
    137)
        grep -q "mpirun noticed that process rank 3 with PID .* exited on signal 9 (Killed)" \
            "$tmp/out" || fail "exit 137 without mpirun's killed-rank message"
        ;;
    *) fail "mpirun exited $rc (documented: 1 or 137)" ;;
    esac
    # (server 1 may see the reset first and ask server 0 to end the job)
    want="server 0: aborting the job at iteration [0-9]*: \(server 1: \)\?worker 1 (.*) is dead"
    grep -q "$want" "$tmp/out" || fail "server 0 does not name worker 1 as dead"
    grep -q "the dead-worker policy is abort" "$tmp/out" || fail "no policy in the message"
    sleep 0.2
    left=$(pgrep -f -- "gravac-.*$tmp/" | tr '\n' ' ')
    [ -z "$left" ] || fail "processes left running: $left"
    ;;
stop)
    # the documented way to stop a job under mpirun with its final checkpoint: SIGTERM to one
    # gravac process, mpirun told to leave the ending to gravac (docs/operations.md, section 4)
    mca=(--mca orte_abort_on_non_zero_status 0)
    start_job 100000000 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 1000000
    job_wait_iter 0 200 30 || fail "worker 0 did not reach iteration 200 within 30 s"
    victim=$(job_pid_with_env OMPI_COMM_WORLD_RANK 1)
    [ -n "$victim" ] || fail "server 1 (world rank 1) not found"
    [ -n "$victim" ] && kill -TERM "$victim"
    wait_job 20
    [ "$rc" -eq 0 ] || fail "mpirun exited $rc (with orte_abort_on_non_zero_status 0: 0)"
    [ "$(grep -c ': exit status 3 (stopped on request)\|: stopped on request at iteration' \
        "$tmp/out")" -eq 5 ] || fail "not every process stopped on request (exit status 3)"
    it=$(grep -o "server 0: stopping the job at iteration [0-9]*" "$tmp/out" | grep -o '[0-9]*$')
    for s in 0 1; do
        f=$(printf '%s/ckpt/shard%04d-iter%012d.gvckpt' "$tmp" "$s" "${it:-0}")
        [ -s "$f" ] || fail "no final checkpoint of shard $s at iteration ${it:-?}"
    done
    ls "$tmp/ckpt"/.tmp-* >/dev/null 2>&1 && fail "a checkpoint write was cut short"
    ;;
*)
    echo "test_e2e_mpirun: unknown scenario $scenario" >&2
    exit 2
    ;;
esac

if [ $fails -ne 0 ]; then
    echo "---- mpirun's output (last 60 lines):" >&2
    tail -n 60 "$tmp/out" >&2
    echo "test_e2e_mpirun $scenario: $fails failures" >&2
    exit 1
fi
echo "test_e2e_mpirun $scenario: OK"
