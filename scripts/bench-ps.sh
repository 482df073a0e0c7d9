#!/usr/bin/env bash
# bench-ps.sh: iteration time and bytes per iteration of the parameter server, dense against
# compressed, on loopback (gravac-launch) and, with --netns, with every process in its own
# network namespace behind links shaped to --rate (tests/e2e/netns_cluster.sh, needs root).
# Dense is the baseline of every run; the ratio column is its time over the method's.
#
#   scripts/bench-ps.sh [--netns] [--rate 1gbit] [--servers 2] [--workers 3] [--steps 60]
#                       [--widths 2048,1024] [--bin build/bin]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
netns=0
rate=1gbit
S=2
W=3
steps=60
widths=2048,1024
while [ $# -gt 0 ]; do
    case $1 in
    --netns) netns=1; shift ;;
    --rate) rate=$2; shift 2 ;;
    --servers) S=$2; shift 2 ;;
    --workers) W=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --widths) widths=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    *) echo "bench-ps: unknown option $1" >&2; exit 2 ;;
    esac
done
methods=("--method dense"
         "--method static --cf 10"
         "--method static --cf 100"
         "--method static --cf 1000"
         "--method gravac-exp --window 10 --epsilon 0.3")
job="--dataset synthetic --synthetic-n 16384 --batch 32 --widths $widths --steps $steps \
--eval-every 100000000 --eval-limit 256"

# prints "ms_per_iter sent_per_iter recv_per_iter" from a worker-0 summary on stdin
parse() {
    awk '
    /summary: worker 0 of/ {
        for (i = 1; i <= NF; i++)
            if ($(i + 1) == "ms" && $(i + 2) == "per") ms = $i
    }
    /summary: bytes per iteration:/ { s = $6 " " $7; r = $9 " " $10; sub(/,$/, "", s) }
    END { printf "%s|%s|%s\n", ms, s, r }'
}

run_loopback() {
    "$bin/gravac-launch" --servers "$S" --workers "$W" $job $1 --insecure --quiet 2>&1 |
        sed -n 's/^\[worker0\] //p' | parse
}

run_netns() {
    bash "$root/tests/e2e/netns_cluster.sh" "$bin" --servers "$S" --workers "$W" \
        --rate "$rate" -- $job $1 --quiet 2>/dev/null | parse
}

printf '# parameter server: %d servers, %d workers, MLP %s on synthetic 64-d data, batch 32, %d '\
'iterations\n# %s, %s\n' "$S" "$W" "$widths" "$steps" "$(uname -r)" "$(nproc) CPUs (shared machine)"
printf '%-44s %10s %7s %12s %12s' method "loop[ms]" ratio "sent/iter" "recv/iter"
[ $netns -eq 1 ] && printf ' %10s %7s' "${rate}[ms]" ratio
printf '\n'
base_l=""
base_n=""
for m in "${methods[@]}"; do
    IFS='|' read -r ms sent recv <<<"$(run_loopback "$m")"
    [ -n "$base_l" ] || base_l=$ms
    printf '%-44s %10s %7.2f %12s %12s' "$m" "$ms" "$(awk -v a="$base_l" -v b="$ms" \
        'BEGIN { print a / b }')" "$sent" "$recv"
    if [ $netns -eq 1 ]; then
        IFS='|' read -r msn _ _ <<<"$(run_netns "$m")"
        [ -n "$base_n" ] || base_n=$msn
        printf ' %10s %7.2f' "$msn" "$(awk -v a="$base_n" -v b="$msn" 'BEGIN { print a / b }')"
    fi
    printf '\n'
done
