#!/bin/bash
# netns_cluster.sh: a multi-host gravac job on one machine. Every server and worker runs in its
# own network namespace, linked to a bridge (in a hub namespace of its own) by a veth pair whose
# two ends are shaped with tc tbf (1 Gbit/s by default, both directions). The job must complete
# and every worker must log the same CF sequence. Everything created is named gvtest-<pid>-...
# and removed on exit, failure or interrupt. Exits 77 (SKIP) when namespaces cannot be created.
#
#   tests/e2e/netns_cluster.sh BIN_DIR [--servers S] [--workers W] [--rate 1gbit]
#                                      [--keep-logs DIR] [-- job options...]
# Job options default to a short MLP run on synthetic data; pass your own after "--", e.g.
#   tests/e2e/netns_cluster.sh build/bin --workers 3 -- --dataset fashion-mnist --epochs 1
set -u
bin=$(cd "$1" && pwd)
shift
S=2
W=3
rate=1gbit
keep=""
while [ $# -gt 0 ]; do
    case $1 in
    --servers) S=$2; shift 2 ;;
    --workers) W=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --keep-logs) keep=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netns_cluster: unknown option $1" >&2; exit 2 ;;
    esac
done
job=("$@")
[ ${#job[@]} -gt 0 ] || job=(--dataset synthetic --synthetic-n 3072 --batch 32 --widths 64,32
                             --steps 40 --method gravac-exp --window 5 --epsilon 0.3)

tag=gvtest-$$
short=gv$$                      # interface names: at most 15 characters
hub=$tag-hub
logs=$(mktemp -d /tmp/$tag-XXXXXX)
pids=()
spaces=()

cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    for ns in "${spaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
    if [ -n "$keep" ]; then mkdir -p "$keep" && cp -r "$logs"/. "$keep"/; fi
    rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$hub" 2>/dev/null; then
    echo "netns_cluster: SKIP: cannot create network namespaces (needs root / CAP_SYS_ADMIN)"
    exit 77
fi
spaces+=("$hub")
if ! ip -n "$hub" link add br0 type bridge; then
    echo "netns_cluster: SKIP: this kernel offers no bridge devices"
    exit 77
fi
ip -n "$hub" link set br0 up
ip -n "$hub" link set lo up

# node NAME INDEX: a namespace with eth0 = 10.77.0.INDEX/24 on the hub's bridge, shaped
node() {
    local ns=$tag-$1 ip=10.77.0.$2 a=$short$1 b=${short}$1h
    ip netns add "$ns" || return 1
    spaces+=("$ns")
    ip link add "$a" type veth peer name "$b" || return 1
    ip link set "$a" netns "$ns" || return 1
    ip link set "$b" netns "$hub" || return 1
    ip -n "$ns" link set "$a" name eth0
    ip -n "$ns" addr add "$ip/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    ip -n "$hub" link set "$b" master br0
    ip -n "$hub" link set "$b" up
    # both directions at $rate: the node's egress, and the hub's egress towards the node
    tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst 512kb latency 20ms || return 1
    tc -n "$hub" qdisc add dev "$b" root tbf rate "$rate" burst 512kb latency 20ms || return 1
}

servers=""
# veth pairs and tbf are kernel features: without them the test cannot run (SKIP), it did not fail
for s in $(seq 0 $((S - 1))); do
    node s$s $((1 + s)) || { echo "netns_cluster: SKIP: cannot set up server $s's namespace, veth "\
"pair or tbf qdisc"; exit 77; }
    servers="$servers${servers:+,}10.77.0.$((1 + s)):7000"
done
for w in $(seq 0 $((W - 1))); do
    node w$w $((101 + w)) || { echo "netns_cluster: SKIP: cannot set up worker $w's namespace, "\
"veth pair or tbf qdisc"; exit 77; }
done

common=(--servers "$servers" --num-workers "$W" --insecure --connect-timeout 30s "${job[@]}")
t0=$(date +%s.%N)
for s in $(seq 0 $((S - 1))); do
    ip netns exec "$tag-s$s" timeout 300 "$bin/gravac-server" "${common[@]}" --rank "$s" \
        --bind 0.0.0.0:7000 --advertise "10.77.0.$((1 + s))" >"$logs/server$s.log" 2>&1 &
    pids+=($!)
done
for w in $(seq 0 $((W - 1))); do
    ip netns exec "$tag-w$w" timeout 300 "$bin/gravac-worker" "${common[@]}" --rank "$w" \
        --metrics-file "$logs/worker$w.jsonl" >"$logs/worker$w.log" 2>&1 &
    pids+=($!)
done
fails=0
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "netns_cluster: process $i exited $rc" >&2
        fails=$((fails + 1))
    fi
done
pids=()
t1=$(date +%s.%N)
if [ $fails -ne 0 ]; then
    tail -n 30 "$logs"/*.log >&2
    exit 1
fi

# every worker logged the same CF sequence
grep '"type":"iter"' "$logs/worker0.jsonl" | grep -o '"level":"[a-z]*","cf":[^,]*' >"$logs/cf0"
n=$(wc -l <"$logs/cf0")
if [ "$n" -eq 0 ]; then echo "netns_cluster: worker 0 logged no iteration" >&2; exit 1; fi
for w in $(seq 1 $((W - 1))); do
    grep '"type":"iter"' "$logs/worker$w.jsonl" | grep -o '"level":"[a-z]*","cf":[^,]*' \
        >"$logs/cf$w"
    if ! cmp -s "$logs/cf0" "$logs/cf$w"; then
        echo "netns_cluster: worker $w's CF sequence differs from worker 0's" >&2
        exit 1
    fi
done
grep '^summary' "$logs/worker0.log"
printf 'netns_cluster: %d servers, %d workers in their own namespaces, links %s: %d iterations '\
'in %.1f s, identical CF sequences (%d distinct CFs)\n' "$S" "$W" "$rate" "$n" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(sort -u "$logs/cf0" | wc -l)"
