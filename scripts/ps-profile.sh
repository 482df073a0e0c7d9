#!/usr/bin/env bash
# ps-profile.sh: where a parameter-server round's CPU time goes, by sampling (perf record -e
# cpu-clock: a software clock, so it works in VMs and containers without hardware counters)
# `gravac-bench ps` without its baseline, then grouping the samples' functions into the round's
# kinds of work. Prints CPU milliseconds per round per kind, all threads summed (servers and
# workers), and the round's wall time from the bench itself.
#
#   scripts/ps-profile.sh [--bin build/bin] [--freq 2000] [-- gravac-bench ps options]
#   e.g. scripts/ps-profile.sh -- --sizes 4M --iters 300
# Needs perf (Debian: linux-perf) and kernel.perf_event_paranoid <= 2 (or root).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
freq=2000
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;;
    --freq) freq=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "ps-profile: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || set -- --sizes 4M --iters 300
command -v perf >/dev/null || { echo "ps-profile: perf is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
perf record -q -e cpu-clock -F "$freq" -o "$tmp/perf.data" -- \
    "$bin/gravac-bench" ps --no-baseline --csv "$@" > "$tmp/bench.csv" 2> "$tmp/bench.err" ||
    { cat "$tmp/bench.err" >&2; exit 1; }
# rounds measured + warmup (the profile covers both; set-up is small beside them)
rounds=$(awk -F, 'NR == 2 { print $9 }' "$tmp/bench.csv")
wall_us=$(awk -F, 'NR == 2 { printf "%.1f", $10 / $9 * 1e6 }' "$tmp/bench.csv")
warm=$(printf '%s\n' "$@" | awk 'p { print; exit } /^--warmup$/ { p = 1 }')
[ -n "$warm" ] || warm=$(awk -v n="$rounds" 'BEGIN { w = int(n / 10); print (w < 3 ? 3 : (w > 100 ? 100 : w)) }')
perf report -i "$tmp/perf.data" --no-children --sort sym -n --stdio 2>/dev/null |
    awk -v freq="$freq" -v rounds="$((rounds + warm))" -v wall="$wall_us" '
    /^ +[0-9.]+%/ {
        n = $2; sym = $NF
        if (sym ~ /^gv_ps_checksum/) k = "checksum (server + worker)"
        else if (sym ~ /^gv_optim_apply/) k = "optimizer (server + worker)"
        else if (sym ~ /copy_to_iter|copy_from_iter|copy_user|rep_movs/) k = "kernel copies (send, receive)"
        else if (sym ~ /^srv_round_push_done|^round_add|sparse_add|decode_add/) k = "aggregation (sum into acc)"
        else if (sym ~ /^gv_ps_average/) k = "average"
        else if (sym ~ /^__memset/) k = "zeroing (acc at round open)"
        else if (sym ~ /^__memmove|^__memcpy/) k = "memcpy (mostly the bench refilling gradients)"
        else if (sym ~ /^srv_update|^update_|^srv_down|sparse_encode|^enc_/) k = "update build (scan, encode)"
        else if (sym ~ /topk|^gv_cmp|^cmp_|^ef_|select|nth/) k = "compression (top-k, error feedback)"
        else if ($3 == "[k]") k = "kernel: TCP/IP, scheduling, other"
        else k = "other user code"
        s[k] += n; tot += n
    }
    END {
        printf "%-48s %10s %8s\n", "kind of work", "ms/round", "share"
        sorter = "sort -rn | cut -f2-"
        for (k in s)
            printf "%d\t%-48s %10.3f %7.1f%%\n", s[k], k, s[k] / freq / rounds * 1e3,
                100 * s[k] / tot | sorter
        close(sorter)
        printf "%-48s %10.3f\n", "total CPU, all threads", tot / freq / rounds * 1e3
        printf "%-48s %10.3f\n", "wall time of a measured round (bench)", wall / 1e3
    }'
