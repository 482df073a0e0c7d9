#!/usr/bin/env bash
# Transport benchmark next to its baselines, in one run on loopback:
#   - stream goodput at 1, 4, 16 and 64 MiB messages: `gravac-bench transport --mode stream`
#     with 1 and with 2 connections, vs iperf3 single stream with -l = the message size
#     (iperf3 accepts -l up to 1 MiB, so larger sizes run iperf3 with -l 1M, its largest), and
#     vs `--mode rawstream` (a blocking socket loop with buffers of the same size: what the
#     message size itself costs, without the transport);
#   - latency: `--mode pingpong` 64 B p50 vs sockperf ping-pong over TCP with 64-byte messages
#     (both RTT/2).
# The machine is shared, so every measurement is repeated (ROUNDS), each round runs ours and
# the baselines back to back (order alternating between rounds), and the ratio is taken per
# round (paired) before the median over rounds. Every process it starts is cleaned up.
#   scripts/bench-transport.sh [--rounds N] [--duration S] [--busy-poll]
# Environment: GV_BENCH (path to gravac-bench; default build/bin/gravac-bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bench=${GV_BENCH:-$root/build/bin/gravac-bench}
rounds=5
dur=2
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --duration) dur=$2; shift 2 ;;
        --busy-poll) extra+=(--busy-poll); shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "bench-transport.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
sizes=(1M 4M 16M 64M)

if [ ! -x "$bench" ]; then
    "$root/scripts/setup.sh" build
fi
for tool in iperf3 sockperf ss; do
    command -v "$tool" >/dev/null || {
        echo "bench-transport.sh: $tool is missing (scripts/setup.sh installs it)" >&2
        exit 1
    }
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

iperf3_len() { if [ "$(bytes_of "$1")" -gt 1048576 ]; then echo 1M; else echo "$1"; fi; }

iperf3_gbps() { # size
    local port out
    port=$(free_port)
    iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
    pids+=($!)
    wait_listen "$port"
    out=$(iperf3 -c 127.0.0.1 -p "$port" -l "$(iperf3_len "$1")" -t "$dur" -f g 2>&1)
    wait "${pids[-1]}" 2>/dev/null || true
    echo "$out" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Gbits/sec") print $(i-1) }'
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

gravac_csv() { # mode size conns [extra...] -> the csv row
    local mode=$1 size=$2 conns=$3
    shift 3
    "$bench" transport --mode "$mode" --sizes "$size" --conns "$conns" --duration "$dur" --csv "$@" |
        tail -n 1
}

median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", (b > 0 ? a / b : 0) }'; }

# One round for one size: the four stream measurements, order alternating between rounds.
stream_round() { # round size
    local r=$1 s=$2 ours two ip raw
    if [ $((r % 2)) -eq 1 ]; then
        ip=$(iperf3_gbps "$s"); raw=$(gravac_csv rawstream "$s" 1 | cut -d, -f10)
        ours=$(gravac_csv stream "$s" 1 "${extra[@]}" | cut -d, -f10)
        two=$(gravac_csv stream "$s" 2 "${extra[@]}" | cut -d, -f10)
    else
        two=$(gravac_csv stream "$s" 2 "${extra[@]}" | cut -d, -f10)
        ours=$(gravac_csv stream "$s" 1 "${extra[@]}" | cut -d, -f10)
        raw=$(gravac_csv rawstream "$s" 1 | cut -d, -f10); ip=$(iperf3_gbps "$s")
    fi
    echo "$ours" >> "$tmp/gv1.$s"; echo "$two" >> "$tmp/gv2.$s"
    echo "$ip" >> "$tmp/ip.$s"; echo "$raw" >> "$tmp/raw.$s"
    ratio "$ours" "$ip" >> "$tmp/r_ip.$s"; ratio "$ours" "$raw" >> "$tmp/r_raw.$s"
    ratio "$two" "$ours" >> "$tmp/r_two.$s"
}

pingpong_round() { # round
    local r=$1 ours base
    if [ $((r % 2)) -eq 1 ]; then
        base=$(sockperf_p50); ours=$(gravac_csv pingpong 64 1 "${extra[@]}" | cut -d, -f13)
    else
        ours=$(gravac_csv pingpong 64 1 "${extra[@]}" | cut -d, -f13); base=$(sockperf_p50)
    fi
    echo "$ours" >> "$tmp/gvpp"; echo "$base" >> "$tmp/sp"
    ratio "$ours" "$base" >> "$tmp/r_pp"
}

echo "== gravac transport vs baselines on loopback: $(nproc) cores, $rounds rounds, ${dur} s per measurement"
echo "   $(date -u +%FT%TZ); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
    for s in "${sizes[@]}"; do stream_round "$r" "$s"; done
    pingpong_round "$r"
    echo "   round $r of $rounds done"
done
echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "Medians over rounds; ratios are medians of per-round (paired) ratios."
printf '%-10s %9s %9s %8s %9s %8s %9s %8s\n' "stream" "gravac" "iperf3" "ratio" "raw sock" "ratio" \
    "2 conns" "2c/1c"
printf '%-10s %9s %9s %8s %9s %8s %9s %8s\n' "(Gb/s)" "1 conn" "(-l)" "vs ip3" "same buf" "vs raw" "" ""
for s in "${sizes[@]}"; do
    printf '%-10s %9.2f %9.2f %8.2f %9.2f %8.2f %9.2f %8.2f\n' "$s ($(iperf3_len "$s"))" \
        "$(median < "$tmp/gv1.$s")" "$(median < "$tmp/ip.$s")" "$(median < "$tmp/r_ip.$s")" \
        "$(median < "$tmp/raw.$s")" "$(median < "$tmp/r_raw.$s")" \
        "$(median < "$tmp/gv2.$s")" "$(median < "$tmp/r_two.$s")"
done
echo
printf '%-34s %9s %9s %8s\n' "ping-pong 64 B, p50 RTT/2 (usec)" "gravac" "sockperf" "ratio"
printf '%-34s %9.3f %9.3f %8.2f\n' "" "$(median < "$tmp/gvpp")" "$(median < "$tmp/sp")" \
    "$(median < "$tmp/r_pp")"
echo
echo "per round (gravac 1 conn / 2 conns / iperf3 / raw socket), Gb/s:"
for s in "${sizes[@]}"; do
    echo "  $s: $(paste -sd' ' "$tmp/gv1.$s") / $(paste -sd' ' "$tmp/gv2.$s") / $(paste -sd' ' "$tmp/ip.$s") / $(paste -sd' ' "$tmp/raw.$s")"
done
echo "  ping-pong p50 usec (gravac / sockperf): $(paste -sd' ' "$tmp/gvpp") / $(paste -sd' ' "$tmp/sp")"
echo
echo "commands:"
echo "  iperf3 -s -1 -p P;  iperf3 -c 127.0.0.1 -p P -l min(SIZE,1M) -t $dur -f g"
echo "  sockperf sr --tcp -i 127.0.0.1 -p P;  sockperf pp --tcp -i 127.0.0.1 -p P -m 64 -t $dur"
echo "  gravac-bench transport --mode stream|rawstream --sizes SIZE --conns 1|2 --duration $dur --csv ${extra[*]}"
echo "  gravac-bench transport --mode pingpong --sizes 64 --duration $dur --csv ${extra[*]}"
