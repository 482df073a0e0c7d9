#!/bin/sh
# test_e2e_overlap.sh BIN_DIR: --overlap (pushes during the backward pass, updates applied while
# the next forward pass runs) trains the same bits as --no-overlap: every worker's and server's
# final parameters are equal between the two runs, file for file, for a dense job in many pieces
# (pieces leave while the first layer's gradient is computed), per-tensor top-k (shards leave
# early), whole-model GraVAC, the CNN and the LSTM; and it did overlap (pushes left during the
# backward pass, the forward pass waited for updates), which the summary says.
set -u
bin=$1
tmp=$(mktemp -d /tmp/gv_e2e_overlap_XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
trap 'rm -rf "$tmp"' EXIT

# run TAG OPTIONS...: the job with and without overlap; the dumps compared
run() {
    tag=$1
    shift
    for o in overlap no-overlap; do
        if ! "$bin/gravac-launch" --servers 2 --workers 2 --insecure --batch 32 --eval-every 40 \
            --dump-params "$tmp/$tag-$o-%n.bin" --$o "$@" >"$tmp/$tag-$o.log" 2>&1; then
            fail "$tag --$o: the job failed"
            tail -5 "$tmp/$tag-$o.log" >&2
            return
        fi
    done
    for f in worker0 worker1 server0 server1; do
        [ -s "$tmp/$tag-overlap-$f.bin" ] || fail "$tag: no dump of $f"
        cmp -s "$tmp/$tag-overlap-$f.bin" "$tmp/$tag-no-overlap-$f.bin" ||
            fail "$tag: $f's parameters differ with and without overlap"
    done
    # the replicas themselves: every worker equals the servers' shards
    cat "$tmp/$tag-overlap-server0.bin" "$tmp/$tag-overlap-server1.bin" >"$tmp/$tag-shards.bin"
    cmp -s "$tmp/$tag-overlap-worker0.bin" "$tmp/$tag-shards.bin" ||
        fail "$tag: worker 0 differs from the servers"
    cmp -s "$tmp/$tag-overlap-worker1.bin" "$tmp/$tag-shards.bin" ||
        fail "$tag: worker 1 differs from the servers"
    grep -q "summary: overlap off (--no-overlap)" "$tmp/$tag-no-overlap.log" ||
        fail "$tag: --no-overlap's summary does not say overlap is off"
}

# the numbers in "overlap: E of N pushes left during the backward pass; ... waited ... W times"
overlap_counts() {
    sed -n 's/.*\[worker0\] summary: overlap: \([0-9]*\) of \([0-9]*\) pushes.* \([0-9]*\) times$/\1 \2 \3/p' \
        "$tmp/$1-overlap.log"
}

# dense MLP, 64 KiB pieces: 8 pieces per shard, 7 leave before the backward pass ends
run dense --model mlp --method dense --piece-size 64K --steps 120
set -- $(overlap_counts dense) 0 0 0
[ "$2" -eq 1920 ] || fail "dense: $2 pushes, expected 120 iterations x 2 servers x 8 pieces"
[ "$1" -ge 1500 ] || fail "dense: only $1 of $2 pushes left during the backward pass"
[ "$3" -ge 1 ] || fail "dense: the forward pass never waited for an update"
# per-tensor top-k: server 1's shard leaves before server 0's tensors are compressed
run topk --model mlp --method static --theta-min 10 --topk-scope tensor --steps 80
set -- $(overlap_counts topk) 0 0 0
[ "$1" -ge 80 ] || fail "topk: $1 of $2 pushes left during the backward pass (expected >= 80)"
# whole-model GraVAC (one unit: everything leaves at the push), the CNN, the LSTM
run gravac --model mlp --method gravac-exp --window 20 --steps 80
run cnn --model cnn --method dense --steps 20 --eval-limit 200
run lstm --model lstm --batch 8 --seq-len 16 --method static --theta-min 10 --steps 20 --eval-limit 50

[ "$fails" -eq 0 ] || exit 1
echo "ok: overlap trains the same bits"
