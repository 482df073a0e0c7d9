#!/bin/bash
# test_e2e_prometheus.sh BIN_DIR: the servers' metrics as a real Prometheus sees them. A job
# (gravac-launch: 2 servers with --metrics-addr 127.0.0.1:0, 2 workers, GraVAC, checkpoints)
# runs while Debian's prometheus scrapes both servers every 500 ms (its own configuration,
# storage and loopback port in a temporary directory). Checks:
#   - `promtool check metrics` on a scrape of each server reports nothing (Prometheus's naming
#     and type conventions), and Prometheus's own view of the types (its metadata API) agrees:
#     a counter's name ends in _total and only a counter's does, the round time is a summary,
#     every family has help text;
#   - through the HTTP API: both targets are up, the iteration counter rises between queries
#     and over a range, the CF in force and the bytes counters are there for each server with
#     the labels job="gravac" and instance=<its metrics address> (and nothing else), the bytes
#     increase, server 0 exports the floor and candidate gains and the refused connection this
#     test provoked (reason="protocol"), the info series carries each server's rank;
#   - docs/grafana-dashboard.json parses, and every query of its panels, with the dashboard's
#     variables filled in, is accepted by this Prometheus and returns data.
# SKIP (77) without prometheus, promtool, jq or curl (scripts/setup.sh installs them).
# Prometheus and the job are stopped on exit, failure or interrupt.
set -u
bin=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
for p in prometheus promtool jq curl ss; do
    if ! command -v $p >/dev/null 2>&1; then
        echo "test_e2e_prometheus: SKIP: $p is not installed (scripts/setup.sh installs it)"
        exit 77
    fi
done
tmp=$(mktemp -d /tmp/gv_e2e_prometheus_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
lp="" pp=""

stop_pid() { # TERM, then KILL after 3 s
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 1 60); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
}
cleanup() {
    stop_pid "$pp"
    if [ -n "$lp" ]; then
        stop_pid "$lp" # launch stops its children
        pkill -KILL -s "$lp" 2>/dev/null
    fi
    if [ $fails -eq 0 ]; then
        rm -rf "$tmp"
    else
        echo "test_e2e_prometheus: files kept in $tmp" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the job (niced: it trains flat out for the whole test, beside the rest of the suite)
setsid nice -n 10 "$bin/gravac-launch" --servers 2 --workers 2 --dataset synthetic --synthetic-n 2048 \
    --batch 16 --widths 32 --steps 100000000 --method gravac-exp --window 25 --epsilon 0.3 \
    --metrics-addr 127.0.0.1:0 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 500 \
    >"$tmp/job.log" 2>&1 &
lp=$!
# "server S: metrics at http://127.0.0.1:PORT/metrics", "server S of 2: bound 127.0.0.1:PORT"
log_port() {
    grep -o "$1" "$tmp/job.log" 2>/dev/null | head -n 1 | grep -o '[0-9]*$'
}
mport=() sport=()
for _ in $(seq 1 400); do
    mport=("$(log_port 'server 0: metrics at http://127.0.0.1:[0-9]*')"
           "$(log_port 'server 1: metrics at http://127.0.0.1:[0-9]*')")
    sport=("$(log_port 'server 0 of 2: bound 127.0.0.1:[0-9]*')")
    [ -n "${mport[0]}" ] && [ -n "${mport[1]}" ] && [ -n "${sport[0]}" ] && break
    sleep 0.05
done
if [ -z "${mport[0]}" ] || [ -z "${mport[1]}" ] || [ -z "${sport[0]}" ]; then
    fail "the servers' metrics and server ports are not in the log"
    tail -n 20 "$tmp/job.log" >&2
    exit 1
fi
targets=("127.0.0.1:${mport[0]}" "127.0.0.1:${mport[1]}")

# an HTTP request on server 0's gravac port: refused before joining, counted by reason
curl -s --noproxy '*' -m 2 "http://127.0.0.1:${sport[0]}/" >/dev/null 2>&1

# ---- promtool on a scrape of each server, once training runs (every family present)
for _ in $(seq 1 200); do
    grep -q 'training starts' "$tmp/job.log" && break
    sleep 0.05
done
sleep 1
for s in 0 1; do
    curl -sf --noproxy '*' -m 5 "http://${targets[$s]}/metrics" >"$tmp/scrape$s.txt" ||
        fail "cannot scrape server $s"
    promtool check metrics <"$tmp/scrape$s.txt" >"$tmp/promtool$s.txt" 2>&1
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$tmp/promtool$s.txt" ]; then
        fail "promtool check metrics on server $s's scrape (exit $rc): $(cat "$tmp/promtool$s.txt")"
    fi
done
grep -q '^gravac_connections_refused_total{reason="protocol"} [1-9]' "$tmp/scrape0.txt" ||
    fail "server 0's scrape has no refused connection (reason protocol)"
grep -q '^gravac_compression_gain{level="candidate"}' "$tmp/scrape0.txt" ||
    fail "server 0's scrape has no candidate gain"

# ---- Prometheus
cat >"$tmp/prometheus.yml" <<EOF
# test_e2e_prometheus: scrape both servers of the test job twice a second
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
scrape_configs:
  - job_name: gravac
    static_configs:
      - targets: ['${targets[0]}', '${targets[1]}']
EOF
promtool check config "$tmp/prometheus.yml" >"$tmp/check-config.txt" 2>&1 ||
    fail "promtool check config: $(cat "$tmp/check-config.txt")"
t0=$(date +%s.%N)
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address=127.0.0.1:0 --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pp=$!
api="" # http://127.0.0.1:PORT: the port the kernel gave, read back from the socket table
for _ in $(seq 1 300); do
    port=$(ss -Hltnp 2>/dev/null | grep "pid=$pp," | awk '{ print $4 }' | sed 's/.*://' | head -n 1)
    if [ -n "$port" ] &&
        curl -sf --noproxy '*' -m 2 "http://127.0.0.1:$port/-/ready" >/dev/null; then
        api=http://127.0.0.1:$port
        break
    fi
    kill -0 "$pp" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$api" ]; then
    fail "prometheus did not become ready"
    cat "$tmp/prometheus.log" >&2
    exit 1
fi

# query EXPR: the API's JSON answer (instant query)
query() {
    curl -sf --noproxy '*' -m 5 -G "$api/api/v1/query" --data-urlencode "query=$1"
}
# value EXPR INSTANCE: the sample of EXPR for one target ("" when absent)
value() {
    query "$1" | jq -r --arg i "$2" '.data.result[] | select(.metric.instance == $i) | .value[1]'
}

# both targets up (the first scrapes start within about 5 s: Prometheus applies its targets on
# a 5 s tick)
up=0
for _ in $(seq 1 300); do
    up=$(query 'up{job="gravac"} == 1' | jq '.data.result | length')
    [ "$up" = 2 ] && break
    sleep 0.1
done
[ "$up" = 2 ] || fail "Prometheus does not see both servers up ($up)"
echo "test_e2e_prometheus: both targets up" \
     "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after start"

# the iteration counter rises, between two queries and over the stored range
for t in "${targets[@]}"; do
    a=$(value gravac_iteration "$t")
    b=$a
    for _ in $(seq 1 50); do
        sleep 0.2
        b=$(value gravac_iteration "$t")
        awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { exit !(b > a) }' && break
    done
    awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { exit !(a > 0 && b > a) }' ||
        fail "$t: gravac_iteration did not rise ($a, then $b)"
    n=$(query "gravac_iteration{instance=\"$t\"}[1m]" |
        jq '[.data.result[0].values[][1] | tonumber] as $v |
            if ($v | length) >= 2 and ([range(1; $v | length) | $v[.] >= $v[. - 1]] | all)
               and $v[-1] > $v[0] then $v | length else 0 end')
    [ "${n:-0}" -ge 2 ] || fail "$t: the stored gravac_iteration samples do not rise"
done

# the CF in force and the bytes counters: one series per server, labelled job and instance only
for m in gravac_compression_factor gravac_compression_factor_floor \
         gravac_compression_factor_candidate gravac_bytes_sent_total gravac_bytes_received_total; do
    got=$(query "$m" | jq -c '[.data.result[].metric] | sort_by(.instance)')
    want=$(jq -nc --arg m "$m" --arg a "${targets[0]}" --arg b "${targets[1]}" \
        '[{__name__: $m, instance: $a, job: "gravac"}, {__name__: $m, instance: $b,
           job: "gravac"}] | sort_by(.instance)')
    [ "$got" = "$want" ] || fail "$m: series $got, want $want"
done
for t in "${targets[@]}"; do
    cf=$(value gravac_compression_factor "$t")
    fl=$(value gravac_compression_factor_floor "$t")
    awk -v c="${cf:-0}" 'BEGIN { exit !(c >= 1) }' || fail "$t: CF in force '$cf'"
    # the floor starts at --theta-min (10) and may be raised up the ladder (10, 20, 40, 160)
    # when a slow scrape catches a long-running job late: a rung of it, never below 10
    case "$fl" in 10 | 20 | 40 | 160) ;; *) fail "$t: CF floor '$fl', want a rung of 10..160" ;; esac
    for dir in sent received; do
        r=$(value "rate(gravac_bytes_${dir}_total[5s])" "$t")
        awk -v r="${r:-0}" 'BEGIN { exit !(r > 0) }' || fail "$t: bytes $dir do not increase ($r)"
    done
done
rank=$(query gravac_server_info | jq -r --arg a "${targets[0]}" --arg b "${targets[1]}" \
    '[.data.result[] | select(.metric.instance == $a) | .metric.rank] +
     [.data.result[] | select(.metric.instance == $b) | .metric.rank] | join(",")')
[ "$rank" = "0,1" ] || fail "gravac_server_info ranks by instance: '$rank', want 0,1"
levels=$(query gravac_compression_gain | jq -r --arg a "${targets[0]}" \
    '[.data.result[] | select(.metric.instance == $a) | .metric.level] | sort | join(",")')
[ "$levels" = "candidate,floor" ] || fail "server 0's gains by level: '$levels'"
ref=$(value 'gravac_connections_refused_total{reason="protocol"}' "${targets[0]}")
[ "${ref:-0}" -ge 1 ] 2>/dev/null || fail "refused connections seen by Prometheus: '$ref'"

# the types as Prometheus read them from the scrapes
curl -sf --noproxy '*' -m 5 -G "$api/api/v1/targets/metadata" \
    --data-urlencode 'match_target={job="gravac"}' >"$tmp/metadata.json" ||
    fail "cannot read the targets' metadata"
jq -r '.data[] | "\(.metric) \(.type) \(.help | length)"' "$tmp/metadata.json" | sort -u \
    >"$tmp/types.txt"
[ "$(wc -l <"$tmp/types.txt")" -ge 20 ] || fail "only $(wc -l <"$tmp/types.txt") metric families"
while read -r name type help_len; do
    case $name in gravac_*) ;; *) fail "$name: not in the gravac_ namespace" ;; esac
    [[ $name =~ ^[a-z][a-z0-9_]*[a-z0-9]$ ]] || fail "$name: not a snake_case name"
    [ "$help_len" -gt 0 ] || fail "$name: no help text"
    case $name in
    *_total) [ "$type" = counter ] || fail "$name is a $type, not a counter" ;;
    *) [ "$type" != counter ] || fail "$name is a counter without the _total suffix" ;;
    esac
    case $name in
    gravac_round_seconds) [ "$type" = summary ] || fail "$name is a $type, not a summary" ;;
    *_info) [ "$type" = gauge ] || fail "$name is a $type, not a gauge" ;;
    esac
done <"$tmp/types.txt"

# ---- the Grafana dashboard: valid JSON whose every query runs here and returns data
dash=$src/docs/grafana-dashboard.json
if ! jq -e '.panels | length > 0' "$dash" >/dev/null 2>&1; then
    fail "$dash does not parse or has no panels"
else
    jq -r '.. | objects | select(has("expr")) | .expr' "$dash" >"$tmp/exprs.txt"
    [ "$(wc -l <"$tmp/exprs.txt")" -ge 10 ] || fail "the dashboard has few queries"
    sleep 2 # a few more scrapes, for the rates over the dashboard's range
    while read -r e; do
        q=$(printf '%s' "$e" | sed -e 's/\$__rate_interval/5s/g' -e 's/\$job/gravac/g' \
            -e 's/\$instance/.*/g')
        res=$(curl -s --noproxy '*' -m 5 -G "$api/api/v1/query" --data-urlencode "query=$q")
        [ "$(printf '%s' "$res" | jq -r .status)" = success ] ||
            { fail "dashboard query refused: $e: $(printf '%s' "$res" | jq -r .error)"; continue; }
        [ "$(printf '%s' "$res" | jq '.data.result | length')" -gt 0 ] ||
            fail "dashboard query returns nothing: $e"
    done <"$tmp/exprs.txt"
    # the variables' label_values(SELECTOR, LABEL): SELECTOR's series carry LABEL
    jq -r '.templating.list[] | select(.type == "query") | .definition' "$dash" |
        sed -n 's/^label_values(\(.*\), *\([a-z_]*\))$/\1 \2/p' >"$tmp/vars.txt"
    [ "$(wc -l <"$tmp/vars.txt")" -ge 2 ] || fail "the dashboard's job and instance variables"
    while read -r sel label; do
        sel=$(printf '%s' "$sel" | sed 's/\$job/gravac/g')
        n=$(query "$sel" | jq --arg l "$label" '[.data.result[].metric[$l] | strings] | length')
        [ "${n:-0}" -ge 1 ] || fail "dashboard variable: no $label in $sel"
    done <"$tmp/vars.txt"
fi

if [ $fails -ne 0 ]; then
    echo "test_e2e_prometheus: $fails failures" >&2
    exit 1
fi
echo "test_e2e_prometheus: OK ($(wc -l <"$tmp/types.txt") metric families," \
     "$(wc -l <"$tmp/exprs.txt") dashboard queries)"
