#!/bin/bash
# test_e2e_slurm.sh BIN_DIR job|kill|cancel: gravac under Slurm's srun --multi-prog, as
# docs/operations.md deploys it, on a one-node Slurm cluster this test starts itself: slurmctld
# and slurmd (Debian's slurm-wlm 22.05) with their own configuration, state and spool in a
# temporary directory, ports picked free on loopback, no munge (auth/none: nothing outside this
# machine can reach them, and they live for the test only). The ranks come from SLURM_PROCID /
# SLURM_NTASKS, the servers' addresses from a rendezvous directory (GV_RENDEZVOUS_DIR).
#   job   srun -n 5 --multi-prog: exit 0, ranks as the multi-prog lines give them, every
#         worker's parameters equal the servers' shards, the same CF sequence everywhere
#   kill  SIGKILL worker 1 (task 3) mid-run: srun ends within a bound, exits 137 and says
#         "task 3: Killed"; the servers name the dead worker; nothing is left running
#   cancel  scancel the job mid-run (Slurm's SIGTERM to every task, as on a time limit or a
#         preemption): every task stops at one iteration and exits 3, srun exits 3, both
#         shards are checkpointed at that iteration
#   torch srun -n 4 --multi-prog with PyTorch workers (tests/torch/torch_job.py through
#         gravac.torch): ranks from SLURM_PROCID, replicas bitwise equal (SKIP without
#         python3-torch and in a sanitized build, whose libgravac Python cannot load)
# SKIP (77) without the Slurm programs (scripts/setup.sh installs them) or without root
# (slurmd starts the tasks as their user). The controller and the node daemon, the job, and
# every process the test started are stopped on exit, failure or interrupt.
set -u
bin=$(cd "$1" && pwd)
scenario=$2
here=$(cd "$(dirname "$0")" && pwd)
. "$here/job_lib.sh"

for p in slurmctld slurmd srun sinfo squeue scancel; do
    if ! command -v $p >/dev/null 2>&1; then
        echo "test_e2e_slurm: SKIP: $p is not installed (scripts/setup.sh installs slurmctld," \
             "slurmd and slurm-client)"
        exit 77
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "test_e2e_slurm: SKIP: slurmd must run as root to start tasks"
    exit 77
fi
if [ "$scenario" = torch ]; then
    if [ "${GV_TEST_SANITIZED:-0}" = 1 ]; then
        echo "test_e2e_slurm: SKIP: a sanitized libgravac cannot be loaded into Python"
        exit 77
    fi
    if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
        echo "test_e2e_slurm: SKIP: no PyTorch for /usr/bin/python3 (python3-torch)"
        exit 77
    fi
fi

tmp=$(mktemp -d /tmp/gv_e2e_slurm_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ctld="" slurmd_pid="" sp=""
export SLURM_CONF=$tmp/slurm.conf

stop_pid() { # TERM, then KILL after 2 s
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}

cleanup() {
    [ -n "$sp" ] && stop_pid "$sp"
    if [ -n "$ctld" ] && kill -0 "$ctld" 2>/dev/null; then
        squeue -h -o %A 2>/dev/null | xargs -r scancel 2>/dev/null
        for _ in $(seq 1 50); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
    fi
    stop_pid "$slurmd_pid"
    stop_pid "$ctld"
    # whatever is left of this test's cluster: job step daemons and tasks (they inherited
    # SLURM_CONF from slurmd and srun)
    for p in $(pgrep -f -- "slurmstepd|gravac-"); do
        tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qx "SLURM_CONF=$SLURM_CONF" &&
            kill -KILL "$p" 2>/dev/null
    done
    if [ $fails -eq 0 ]; then rm -rf "$tmp"; else echo "test_e2e_slurm: files kept in $tmp" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() { # two TCP ports free on loopback now (perl-base is part of every Debian)
    perl -MIO::Socket::INET -e 'my @s = map { IO::Socket::INET->new(Listen => 1,
        LocalAddr => "127.0.0.1", LocalPort => 0) or die "bind: $!" } 1 .. 2;
        print join(" ", map { $_->sockport } @s), "\n"'
}

# start_cluster: slurmctld and slurmd in the foreground of background jobs, up to 3 tries (a
# port picked free can be taken before the daemon binds it); true once the node is idle
start_cluster() {
    local host ports try t0
    host=$(hostname -s)
    t0=$(date +%s.%N)
    for try in 1 2 3; do
        ports=$(free_ports) || return 1
        set -- $ports
        rm -rf "$tmp/state" "$tmp/spool"
        mkdir -p "$tmp/state" "$tmp/spool"
        cat >"$SLURM_CONF" <<EOF
# a one-node cluster for test_e2e_slurm (try $try)
ClusterName=gvtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=gv Nodes=$host Default=YES MaxTime=10 State=UP
EOF
        slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
        ctld=$!
        slurmd -D -f "$SLURM_CONF" >"$tmp/slurmd.out" 2>&1 &
        slurmd_pid=$!
        for _ in $(seq 1 150); do
            if [ "$(sinfo -h -o %t 2>/dev/null)" = idle ]; then
                echo "test_e2e_slurm: slurmctld and slurmd up in" \
                     "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s" \
                     "(ports $1, $2)"
                return 0
            fi
            kill -0 "$ctld" 2>/dev/null && kill -0 "$slurmd_pid" 2>/dev/null || break
            sleep 0.1
        done
        echo "test_e2e_slurm: the cluster did not come up (try $try):" >&2
        tail -n 5 "$tmp/slurmctld.log" "$tmp/slurmd.log" "$tmp"/*.out >&2 2>/dev/null
        stop_pid "$slurmd_pid"
        stop_pid "$ctld"
        ctld="" slurmd_pid=""
    done
    return 1
}

if ! start_cluster; then
    fail "slurmctld and slurmd could not be started"
    exit 1
fi

mkdir "$tmp/rdv"
export GV_NUM_SERVERS=2 GV_RENDEZVOUS_DIR=$tmp/rdv

# start_job: srun in the background (pid in $sp), its output in $tmp/out. A
# multi-prog line is not expanded by a shell and Slurm replaces %-sequences in it itself
# (%o: the task's offset within its line, here its rank within the role), so the dump
# files are named with %o, not gravac's %r.
start_job() { # start_job ITERATIONS [more options for every process]
    local common
    common=$(job_common "$1" "$tmp/rdv" | sed "s| --num-servers 2 --rendezvous-dir [^ ]*||")
    shift
    common="$common $*"
    cat >"$tmp/job.conf" <<EOF
0-1 $bin/gravac-server $common --bind 127.0.0.1:0 --dump-params $tmp/server%o.bin
2-4 $bin/gravac-worker $common --quiet --metrics-file $tmp/worker%o.jsonl \
    --dump-params $tmp/worker%o.bin
EOF
    # -O: 5 tasks on this machine's CPUs; -t: Slurm's own bound on the job (minutes)
    srun -O -n 5 -t 2 --multi-prog "$tmp/job.conf" >"$tmp/out" 2>&1 &
    sp=$!
}

wait_job() {
    local end=$(($(date +%s) + $1))
    rc=-1
    while kill -0 "$sp" 2>/dev/null && [ "$(date +%s)" -le $end ]; do sleep 0.02; done
    if kill -0 "$sp" 2>/dev/null; then
        fail "srun still running after $1 s"
        return
    fi
    wait "$sp"
    rc=$?
    sp=""
}

case $scenario in
job)
    start_job 600
    wait_job 100
    [ "$rc" -eq 0 ] || fail "srun exited $rc"
    for s in 0 1; do
        want="gravac-server $s of 2 (rank from SLURM_PROCID=$s), 3 workers"
        grep -q "gravac\[server$s\] .* $want" "$tmp/out" ||
            fail "server $s did not take its rank from SLURM_PROCID"
        grep -q "server $s: job finished after 600 iterations" "$tmp/out" ||
            fail "server $s did not finish the job"
    done
    grep -q "gravac-worker 0 of 3 (rank from SLURM_PROCID=2 - 2 servers" "$tmp/out" ||
        fail "worker 0 is not task 2"
    grep -q "checksums verified .* 0 mismatches" "$tmp/out" || fail "no checksum summary"
    job_check_replicas
    ;;
kill)
    start_job 100000000
    job_wait_iter 0 200 30 || fail "worker 0 did not reach iteration 200 within 30 s"
    victim=$(job_pid_with_env SLURM_PROCID 3)
    [ -n "$victim" ] || fail "worker 1 (task 3) not found"
    t0=$(date +%s%N)
    [ -n "$victim" ] && kill -KILL "$victim"
    wait_job 20
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    echo "test_e2e_slurm: srun ended $secs s after worker 1 was killed, exit status $rc"
    awk -v s="$secs" 'BEGIN { exit !(s < 5) }' || fail "the job took $secs s to end"
    [ "$rc" -eq 137 ] || fail "srun exited $rc (documented: 137, the killed task's 128 + 9)"
    grep -q "srun: error: .*: task 3: Killed" "$tmp/out" || fail "srun does not name task 3"
    want="server 0: aborting the job at iteration [0-9]*: \(server 1: \)\?worker 1 (.*) is dead"
    grep -q "$want" "$tmp/out" || fail "server 0 does not name worker 1 as dead"
    sleep 0.2
    left=$(pgrep -f -- "gravac-.*$tmp/" | tr '\n' ' ')
    [ -z "$left" ] || fail "processes left running: $left"
    ;;
cancel)
    start_job 100000000 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 1000000
    job_wait_iter 0 200 30 || fail "worker 0 did not reach iteration 200 within 30 s"
    id=$(squeue -h -o %A | head -n 1)
    [ -n "$id" ] || fail "no job in squeue"
    t0=$(date +%s%N)
    [ -n "$id" ] && scancel "$id"
    wait_job 40
    secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    echo "test_e2e_slurm: srun ended $secs s after scancel, exit status $rc"
    # Slurm sends SIGTERM first and SIGKILL only after KillWait (30 s): gravac must be done
    # long before
    awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "the job took $secs s to stop"
    [ "$rc" -eq 3 ] || fail "srun exited $rc (documented: 3, stopped on request)"
    # srun groups tasks that exit close together ("tasks 0-4", or "tasks 2-4" then
    # "tasks 0-1"): every one of the five must be named on some "exit code 3" line
    exited=$(sed -n 's/^srun: error: .*: tasks\? \([0-9,-]*\): Exited with exit code 3$/\1/p' \
        "$tmp/out" | tr ',' '\n' | awk -F- '{ for (i = $1; i <= ($2 == "" ? $1 : $2); i++) print i }' |
        sort -un | tr '\n' ' ')
    [ "$exited" = "0 1 2 3 4 " ] ||
        fail "srun does not say that every task exited 3 (it names: ${exited:-none})"
    for s in 0 1; do
        grep -q "gravac-server $s: exit status 3 (stopped on request)" "$tmp/out" ||
            fail "server $s did not stop on request"
    done
    # both shards checkpointed at the one iteration the job stopped at
    it=$(grep -o "server 0: stopping the job at iteration [0-9]*" "$tmp/out" | grep -o '[0-9]*$')
    for s in 0 1; do
        f=$(printf '%s/ckpt/shard%04d-iter%012d.gvckpt' "$tmp" "$s" "${it:-0}")
        [ -s "$f" ] || fail "no checkpoint of shard $s at iteration ${it:-?}"
    done
    ;;
torch)
    # the workers read their rank (SLURM_PROCID - 2) and the options from the environment
    srv="$bin/gravac-server --model external --optimizer caller --method static --cf 4"
    printf '%s\n' "0-1 $srv --insecure --bind 127.0.0.1:0 --num-workers 2" \
        "2-3 /usr/bin/python3 $here/../torch/torch_job.py --out $tmp --steps 10" >"$tmp/job.conf"
    GV_NUM_WORKERS=2 GV_INSECURE=true GV_METHOD=static GV_CF=4 OMP_NUM_THREADS=1 \
        PYTHONPATH=$bin/../python srun -O -n 4 -t 2 --multi-prog "$tmp/job.conf" >"$tmp/out" 2>&1 &
    sp=$!
    wait_job 100
    [ "$rc" -eq 0 ] || fail "srun exited $rc"
    grep -q "gravac-server 0 of 2 (rank from SLURM_PROCID=0)" "$tmp/out" ||
        fail "server 0 did not take its rank from SLURM_PROCID"
    grep -q "torch_job: worker 0 done" "$tmp/out" || fail "worker 0 did not finish"
    cmp -s "$tmp/params-0.bin" "$tmp/params-1.bin" || fail "the replicas differ"
    ;;
*)
    echo "test_e2e_slurm: unknown scenario $scenario" >&2
    exit 2
    ;;
esac

if [ $fails -ne 0 ]; then
    echo "---- srun's output (last 60 lines):" >&2
    tail -n 60 "$tmp/out" >&2
    echo "test_e2e_slurm $scenario: $fails failures" >&2
    exit 1
fi
echo "test_e2e_slurm $scenario: OK"
