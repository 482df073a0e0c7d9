#!/usr/bin/env bash
# Transport benchmark next to its baselines, in one run on loopback:
#   - stream goodput: iperf3 single stream (-l = message size; iperf3 caps -l at 1 MiB, so
#     larger sizes are compared with -l 1M, its largest) and qperf tcp_bw (-m = message size,
#     any size: the like-for-like baseline above 1 MiB) vs `gravac-bench transport --mode
#     stream` with 1 and with 2 connections, at 1, 4, 16 and 64 MiB;
#   - latency: sockperf ping-pong over TCP with 64-byte messages vs `gravac-bench transport
#     --mode pingpong` at 64 bytes (both report RTT/2 percentiles).
# The measurements are interleaved and repeated (ROUNDS, default 3); the table shows the
# median of the rounds and the ratio ours/baseline. Every process it starts is cleaned up.
#   scripts/bench-transport.sh [--rounds N] [--duration S] [--busy-poll]
# Environment: GV_BENCH (path to gravac-bench; default build/bin/gravac-bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${GV_BENCH:-$root/build/bin/gravac-bench}
rounds=3
dur=3
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --duration) dur=$2; shift 2 ;;
        --busy-poll) extra+=(--busy-poll); shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "bench-transport.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
sizes=(1M 4M 16M 64M)

if [ ! -x "$bench" ]; then
    "$root/scripts/setup.sh" build
fi
for tool in iperf3 sockperf qperf ss; do
    command -v "$tool" >/dev/null || { echo "bench-transport.sh: $tool is missing (scripts/setup.sh installs it)" >&2; exit 1; }
done

tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        if [ -z "$(ss -Htan "sport = :$p")" ]; then echo "$p"; return; fi
    done
}

wait_listen() { # port: wait up to 5 s for a listener
    local i
    for i in $(seq 50); do
        [ -n "$(ss -Htln "sport = :$1")" ] && return 0
        sleep 0.1
    done
    echo "bench-transport.sh: nothing listens on port $1" >&2
    return 1
}

bytes_of() { # 1M -> 1048576
    local v=${1%[KMG]} u=${1: -1}
    case "$u" in K) echo $((v << 10)) ;; M) echo $((v << 20)) ;; G) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

iperf3_gbps() { # size
    local port len=$1 out
    [ "$(bytes_of "$len")" -gt 1048576 ] && len=1M
    port=$(free_port)
    iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    pids+=($!)
    wait_listen "$port"
    out=$(iperf3 -c 127.0.0.1 -p "$port" -l "$len" -t "$dur" -f g 2>&1)
    wait "${pids[-1]}" 2>/dev/null || true
    echo "$out" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print $(i-1) }'
}

qperf_gbps() { # size
    local port out
    port=$(free_port)
    qperf -lp "$port" >/dev/null 2>&1 &
    pids+=($!)
    wait_listen "$port"
    out=$(qperf -lp "$port" -t "$dur" -m "$1" -ub 127.0.0.1 tcp_bw 2>&1)
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
    echo "$out" | awk '/bw *=/ { v = $3; if ($4 ~ /^Mb/) v /= 1000; if ($4 ~ /^Kb/) v /= 1e6; print v }'
}

sockperf_p50() {
    local port out
    port=$(free_port)
    sockperf sr --tcp -i 127.0.0.1 -p "$port" >/dev/null 2>&1 &
    pids+=($!)
    wait_listen "$port"
    out=$(sockperf pp --tcp -i 127.0.0.1 -p "$port" -m 64 -t "$dur" 2>&1)
    kill "${pids[-1]}" 2>/dev/null || true
    wait "${pids[-1]}" 2>/dev/null || true
    echo "$out" | awk '/percentile 50.000/ { print $NF }'
}

gravac_csv() { # mode size conns -> csv row without the header
    "$bench" transport --mode "$1" --sizes "$2" --conns "$3" --duration "$dur" --csv "${extra[@]}" | tail -n 1
}
gravac_gbps() { gravac_csv stream "$1" "$2" | cut -d, -f10; }
gravac_p50() { gravac_csv pingpong 64 1 | cut -d, -f13; }

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== transport vs baselines on loopback ($(nproc) cores, $rounds rounds of ${dur} s each; $(date -u +%FT%TZ))"
echo "   load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
    for s in "${sizes[@]}"; do
        iperf3_gbps "$s" >> "$tmp/iperf3.$s"
        qperf_gbps "$s" >> "$tmp/qperf.$s"
        gravac_gbps "$s" 1 >> "$tmp/gv1.$s"
        gravac_gbps "$s" 2 >> "$tmp/gv2.$s"
    done
    sockperf_p50 >> "$tmp/sockperf"
    gravac_p50 >> "$tmp/gvpp"
    echo "   round $r done"
done
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
printf '%-30s %8s %8s %6s %8s %6s %8s\n' "measure" "gravac" "iperf3" "ratio" "qperf" "ratio" "2 conns"
for s in "${sizes[@]}"; do
    ours=$(median < "$tmp/gv1.$s"); ip=$(median < "$tmp/iperf3.$s")
    qp=$(median < "$tmp/qperf.$s"); two=$(median < "$tmp/gv2.$s")
    il=$s; [ "$(bytes_of "$s")" -gt 1048576 ] && il="1M*"
    printf '%-30s %8.2f %8.2f %6s %8.2f %6s %8.2f\n' "stream $s Gb/s (iperf3 -l $il)" "$ours" "$ip" \
        "$(ratio "$ours" "$ip")" "$qp" "$(ratio "$ours" "$qp")" "$two"
done
ours=$(median < "$tmp/gvpp"); base=$(median < "$tmp/sockperf")
printf '%-30s %8.3f %8s %6s %8s %6s %8s\n' "pingpong 64 B p50 us (RTT/2)" "$ours" "" "" "" "" ""
printf '%-30s %8s %8.3f %6s\n' "  sockperf pp 64 B p50 (RTT/2)" "" "$base" "$(ratio "$ours" "$base")"
echo "  (* iperf3 accepts -l up to 1 MiB; qperf uses the message size itself)"
echo
echo "per-round values (gravac 1 conn | 2 conns | iperf3 or sockperf | qperf):"
for s in "${sizes[@]}"; do
    echo "  stream $s: $(paste -sd' ' "$tmp/gv1.$s") | $(paste -sd' ' "$tmp/gv2.$s") | $(paste -sd' ' "$tmp/iperf3.$s") | qperf $(paste -sd' ' "$tmp/qperf.$s")"
done
echo "  pingpong 64: $(paste -sd' ' "$tmp/gvpp") | - | $(paste -sd' ' "$tmp/sockperf")"
echo
echo "commands: iperf3 -s -1 -p P; iperf3 -c 127.0.0.1 -p P -l SIZE -t $dur -f g"
echo "          qperf -lp P; qperf -lp P -t $dur -m SIZE -ub 127.0.0.1 tcp_bw"
echo "          sockperf sr --tcp -i 127.0.0.1 -p P; sockperf pp --tcp -i 127.0.0.1 -p P -m 64 -t $dur"
echo "          $bench transport --mode stream --sizes SIZE --conns 1|2 --duration $dur --csv ${extra[*]}"
echo "          $bench transport --mode pingpong --sizes 64 --duration $dur --csv ${extra[*]}"
