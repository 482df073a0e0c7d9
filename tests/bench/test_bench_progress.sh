#!/bin/bash
# test_bench_progress.sh BIN_DIR: the progress line of gravac-bench train and scaling.
#   - not a terminal (CI, a redirect), default --progress auto: no progress at all;
#   - --progress on into a file: one well-formed line per update ("progress: run i/n [link]
#     method rK: starting | iteration i/N (P%), R it/s; elapsed M:SS, remaining ~M:SS|?"), a
#     "starting" line for every run in order, and iteration lines in between;
#   - on a terminal (a pseudo-terminal from script(1)), auto: the line is redrawn in place
#     (carriage return, erase line) and erased before the results; --quiet: nothing;
#   - scaling: the same two file modes, with its own line ("batch size i/n (B b) ...");
#   - a bad --progress value is refused (exit 2).
# Tiny runs: a 1-server 2-worker job on synthetic data for train, two batch sizes for scaling.
set -u
bin=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/gv_test_bench_progress_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
cleanup() {
    if [ $fails -eq 0 ]; then rm -rf "$tmp"; else echo "outputs kept in $tmp" >&2; fi
}
trap cleanup EXIT

train() { # train OUT_NAME METHODS [options...]: stdout to $tmp/NAME.out, stderr to .err
    local name=$1 methods=$2
    shift 2
    timeout 100 "$bin/gravac-bench" train --net loopback --servers 1 --workers 2 \
        --methods "$methods" --repeats 1 --steps 3000 --eval-every 1000 --iperf 0 --no-plots \
        --out "$tmp/$name" "$@" -- --dataset synthetic --synthetic-n 2048 --widths 32 \
        --batch 16 >"$tmp/$name.out" 2>"$tmp/$name.err"
}
scaling() {
    local name=$1
    shift
    timeout 100 "$bin/gravac-bench" scaling --batches 256,2048 --trials 2 --refine 1 \
        --goal-error 0.45 --max-epochs 3 --val 1000 --eval-samples 4096 --lr-range 0.01,0.3 \
        --om-range 0.05,0.3 --no-plots --out "$tmp/$name" "$@" >"$tmp/$name.out" \
        2>"$tmp/$name.err"
}
t='[0-9]+:[0-9]{2}(:[0-9]{2})?'
tail_re="; elapsed $t, remaining ~($t|\\?)\$"

# ---- train: quiet by default when not on a terminal
train quiet dense || fail "train (quiet): exit $?"
grep -q 'progress:' "$tmp/quiet.out" "$tmp/quiet.err" && fail "train printed progress into a file"
grep -q '^\[loopback\] dense ' "$tmp/quiet.out" || fail "train (quiet): no result line"

# ---- train, forced into a file: well-formed lines
# every 0.02 s: a run of 3000 iterations lasts 0.2 s on a fast machine (CI: dense)
train on dense,static-10 --progress on --progress-every 0.02 || fail "train (on): exit $?"
run_re="^progress: run [12]/2 \\[loopback\\] (dense|static-10) r0: "
it_re="iteration [0-9]+/3000 \\([0-9]+%\\), [0-9]+\\.[0-9] it/s"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    [[ $line =~ ${run_re}(starting|${it_re})${tail_re} ]] || fail "malformed line: '$line'"
done <"$tmp/on.err"
[ $n -ge 3 ] || fail "train (on): only $n progress lines"
# a run whose first iteration takes longer than one --progress-every (a loaded machine, ASan)
# says "starting" more than once: one start per run, in order, is what counts
starts=$(grep -o '^progress: run [0-9]/2 \[loopback\] [a-z0-9-]* r0: starting' "$tmp/on.err" |
    uniq | awk '{ print $3, $5 }' | tr '\n' ' ')
[ "$starts" = "1/2 dense 2/2 static-10 " ] || fail "train (on): run starts '$starts'"
grep -Eq "^progress: run 1/2 .* r0: ${it_re}" "$tmp/on.err" ||
    fail "train (on): no iteration line during run 1"
grep -Eq "^progress: .*: iteration [0-9]+/3000 .*remaining ~$t\$" "$tmp/on.err" ||
    fail "train (on): no estimate of the remaining time"
grep -q '^\[loopback\] static-10 ' "$tmp/on.out" || fail "train (on): no result line"
grep -q 'progress:' "$tmp/on.out" && fail "train (on): progress on stdout"

# ---- train on a terminal: redrawn in place by default, nothing with --quiet
if command -v script >/dev/null 2>&1; then
    for mode in tty tty-quiet; do
        extra=""
        [ $mode = tty-quiet ] && extra=--quiet
        timeout 100 script -qec "'$bin/gravac-bench' train --net loopback --servers 1 \
            --workers 2 --methods dense --repeats 1 --steps 3000 --eval-every 1000 --iperf 0 \
            --no-plots --out '$tmp/$mode' $extra -- --dataset synthetic --synthetic-n 2048 \
            --widths 32 --batch 16" /dev/null >"$tmp/$mode.txt" 2>&1 </dev/null ||
            fail "train ($mode): exit $?"
        grep -q '\[loopback\] dense  *r0 seed 1: 3000 its' "$tmp/$mode.txt" ||
            fail "train ($mode): no result line"
    done
    grep -q $'\r\x1b\\[Kprogress: run 1/1 \\[loopback\\] dense r0: starting' "$tmp/tty.txt" ||
        fail "train on a terminal: no line redrawn in place"
    # the last progress line is erased before the result line
    grep -q $'\r\x1b\\[K\\[loopback\\] dense ' "$tmp/tty.txt" ||
        fail "train on a terminal: the progress line is not erased before the results"
    grep -q 'progress:' "$tmp/tty-quiet.txt" && fail "train --quiet printed progress on a terminal"
else
    fail "script(1) (bsdutils) is missing: cannot test the terminal mode"
fi

# ---- scaling
scaling squiet || fail "scaling (quiet): exit $?"
grep -q 'progress:' "$tmp/squiet.out" "$tmp/squiet.err" &&
    fail "scaling printed progress into a file"
scaling son --progress on --progress-every 0.1 || fail "scaling (on): exit $?"
b_re="^progress: batch size [12]/2 \\(B (256|2048)\\)"
st_re=", stage [012]: [0-9]+ of [0-9]+ trials running, step [0-9]+/[0-9]+, [0-9]+ samples/s"
n=0
while IFS= read -r line; do
    n=$((n + 1))
    [[ $line =~ ${b_re}(: starting|${st_re})${tail_re} ]] || fail "malformed line: '$line'"
done <"$tmp/son.err"
[ $n -ge 3 ] || fail "scaling (on): only $n progress lines"
[ "$(grep -c ': starting;' "$tmp/son.err")" -eq 2 ] || fail "scaling (on): not one start per B"
grep -Eq "${b_re}${st_re}" "$tmp/son.err" || fail "scaling (on): no line during the trials"
grep -q 'regimes' "$tmp/son.out" || fail "scaling (on): no report"

# ---- a bad value
"$bin/gravac-bench" train --progress sometimes >"$tmp/bad.txt" 2>&1
[ $? -eq 2 ] || fail "train --progress sometimes: not refused with exit 2"
"$bin/gravac-bench" scaling --progress-every -1 >"$tmp/bad.txt" 2>&1
[ $? -eq 2 ] || fail "scaling --progress-every -1: not refused with exit 2"

if [ $fails -ne 0 ]; then
    for f in "$tmp"/*.err; do echo "---- $f" >&2; head -n 20 "$f" >&2; done
    echo "test_bench_progress: $fails failures" >&2
    exit 1
fi
echo "test_bench_progress: OK"
