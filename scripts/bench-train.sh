#!/usr/bin/env bash
# bench-train.sh: the configurations of docs/results.md, by name, so that anyone can re-measure
# them. Each one is a single gravac-bench invocation (printed before it runs); the bench itself
# stops every process and removes every namespace it made on any exit (Ctrl-C included), and
# this script removes its output directory's stale runs first.
#
#   scripts/bench-train.sh short-train   # every method, 100 Mbit/s, 400 iterations, 1 repeat
#   scripts/bench-train.sh short-scaling # 4 batch sizes, 4+2 trials each (a few minutes)
#   scripts/bench-train.sh claim         # every method, 100 Mbit/s, 2 servers, 4 workers
#   scripts/bench-train.sh epsilon       # GraVAC with epsilon 0.7, 0.3, 0.1, 0.02 (same link)
#   scripts/bench-train.sh scaling       # the batch-size study, B = 16 .. 8192
#   scripts/bench-train.sh downlink      # dense, dense-fp16, static CFs, GraVAC: bounded and
#                                        # union downlinks side by side, 100 Mbit/s
#   scripts/bench-train.sh downlink-scaling  # bytes per worker and iteration and iteration
#                                        # time for W = 2, 4, 8, 16, both downlinks
#   scripts/bench-train.sh downlink-cnn  # accuracy, bounded vs union downlink: the CNN
#   scripts/bench-train.sh downlink-lstm #   ... and the char-LSTM (loopback: accuracy only)
#   scripts/bench-train.sh topk-scope    # per-tensor vs whole-model top-k, 100 Mbit/s
#   scripts/bench-train.sh topk-scope-cnn  # the same on the CNN (loopback: accuracy only)
#   scripts/bench-train.sh conns         # --conns-per-server 1, 2, 4 at 1 Gbit/s
#   scripts/bench-train.sh matrix        # issue 15: 4 jobs (MLP, CNN, char-LSTM, a 1.6 M
#                                        # parameter MLP) x 100 Mbit/s and 1 Gbit/s x dense,
#                                        # dense-fp16, static 10/100/1000, gravac-exp,
#                                        # accordion, auto (one invocation per job)
#   scripts/bench-train.sh matrix-JOB    # one job of the matrix: mlp, cnn, lstm, mlp-wide
#   scripts/bench-train.sh fp16-JOB      # one matrix job: the static CFs and AUTO with f32 and
#                                        # with fp16 sparse values
#   scripts/bench-train.sh overlap       # issue 17: --overlap vs --no-overlap vs compute and
#                                        # communication alone, dense, 1 Gbit/s, 1+1 process
#   options: --out DIR (default build/bench-results/<name>), --bin DIR (default build/bin);
#   after "--", more gravac-bench options (they override the ones below)
# Network namespaces need root; without it `train` runs on loopback and says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
name=${1:-}
[ -n "$name" ] || { sed -n '2,30p' "$0" >&2; exit 2; }
shift
out=
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench-train: unknown option $1" >&2; exit 2 ;;
    esac
done
out=${out:-$root/build/bench-results/$name}
job=() # job options (after the bench options' "--")
if [ ! -x "$bin/gravac-bench" ]; then
    echo "bench-train: no $bin/gravac-bench (build first)" >&2
    exit 2
fi

# The matrix of issue 15: every method with its own defaults, the same on every job; each
# job's targets end about one point under dense's final accuracy in its budget.
matrix_methods=dense,dense-fp16,static-10,static-100,static-1000,gravac-exp,accordion,auto
matrix_bench() { # JOB -> the gravac-bench options of that job
    local common="train --rates 100mbit,1gbit --servers 2 --workers 4 --repeats 1"
    common="$common --methods $matrix_methods"
    case $1 in
    mlp) echo "$common --steps 1000 --eval-every 20 --target 0.87 --also-targets 0.80,0.84,0.86" ;;
    cnn) echo "$common --steps 600 --eval-every 50 --target 0.89 --also-targets 0.84,0.87" ;;
    lstm) echo "$common --steps 600 --eval-every 50 --target 0.40 --also-targets 0.30,0.35,0.38" ;;
    mlp-wide) echo "$common --steps 600 --eval-every 25 --target 0.87 --also-targets 0.80,0.84,0.86" ;;
    *) return 1 ;;
    esac
}
matrix_job() { # JOB -> its job options (after "--"; the MLP's: the bench's default job)
    case $1 in
    mlp) echo "--model mlp --dataset fashion-mnist --batch 64 --lr 0.1 --momentum 0.815 \
--lr-schedule step:750" ;;
    cnn) echo "--model cnn --batch 64 --lr 0.05 --momentum 0.9 --lr-schedule step:450" ;;
    lstm) echo "--model lstm --batch 32 --seq-len 32 --lr 0.5 --momentum 0.9 --lr-schedule step:450" ;;
    mlp-wide) echo "--model mlp --widths 2048 --batch 64 --lr 0.1 --momentum 0.815 \
--lr-schedule step:450" ;;
    esac
}

case $name in
matrix)
    # one invocation per job (each has its own job options), into $out/<job>
    for mjob in mlp cnn lstm mlp-wide; do
        "$0" "matrix-$mjob" --out "$out/$mjob" --bin "$bin" -- "$@" || exit 1
    done
    exit 0 ;;
matrix-*)
    mjob=${name#matrix-}
    a=$(matrix_bench "$mjob") || { echo "bench-train: no job '$mjob'" >&2; exit 2; }
    # shellcheck disable=SC2206 # plain words
    args=($a)
    # shellcheck disable=SC2206
    job=($(matrix_job "$mjob")) ;;
fp16-*)
    # fp16 values on the sparse wire against f32, every other setting the matrix job's: the
    # static CFs and AUTO each both ways, in one invocation (docs/results.md section 15)
    mjob=${name#fp16-}
    a=$(matrix_bench "$mjob") || { echo "bench-train: no job '$mjob'" >&2; exit 2; }
    # shellcheck disable=SC2206 # plain words
    args=($a)
    args=("${args[@]/$matrix_methods/}")
    for m in "static --cf 10" "static --cf 100" "static --cf 1000" auto; do
        l=${m#static --cf }
        [ "$m" = auto ] || l=static-$l
        args+=(--add-method "$l-f32=--method $m --no-fp16" --add-method "$l-fp16=--method $m --fp16")
    done
    # shellcheck disable=SC2206
    job=($(matrix_job "$mjob")) ;;
short-train)
    args=(train --rates 100mbit --servers 2 --workers 4 --repeats 1 --steps 400
          --eval-every 20 --target 0.85 --also-targets 0.80,0.84,0.86) ;;
short-scaling)
    args=(scaling --batches 64,256,1024,4096 --trials 4 --refine 2 --max-epochs 5
          --goal-error 0.14) ;;
claim)
    args=(train --rates 100mbit --servers 2 --workers 4 --repeats 3 --steps 1000
          --eval-every 20) ;;
epsilon)
    g="--method gravac-exp --theta-min 10 --theta-max 1000 --omega 0.01 --window 100"
    args=(train --rates 100mbit --servers 2 --workers 4 --repeats 1 --steps 1000
          --eval-every 20 --methods dense,static-10,static-100
          --add-method "gravac-e0.7=$g --epsilon 0.7" --add-method "gravac-e0.3=$g --epsilon 0.3"
          --add-method "gravac-e0.1=$g --epsilon 0.1" --add-method "gravac-e0.02=$g --epsilon 0.02")
    ;;
scaling)
    args=(scaling --trials 12 --refine 6 --max-epochs 30) ;;
downlink)
    args=(train --rates 100mbit --servers 2 --workers 4 --repeats 1 --steps 1000
          --eval-every 20 --methods "dense,dense-fp16,static-10,static-10-union,static-100,\
static-100-union,static-1000,static-1000-union,gravac-exp,gravac-exp-union") ;;
downlink-cnn)
    args=(train --net loopback --servers 2 --workers 4 --repeats 1 --steps 600 --eval-every 50
          --target 0.86 --also-targets 0.80,0.84,0.88 --iperf 0
          --methods dense,static-10,static-10-union,static-100,static-100-union,gravac-exp,\
gravac-exp-union)
    job=(--model cnn --dataset fashion-mnist --batch 64 --lr 0.05 --momentum 0.9
         --lr-schedule step:450) ;;
downlink-lstm)
    args=(train --net loopback --servers 2 --workers 4 --repeats 1 --steps 600 --eval-every 50
          --target 0.40 --also-targets 0.30,0.35,0.42 --iperf 0
          --methods dense,static-10,static-10-union,static-100,static-100-union,gravac-exp,\
gravac-exp-union)
    job=(--model lstm --batch 32 --lr 0.5 --lr-schedule cosine --eval-limit 2000) ;;
topk-scope)
    m="--method static --topk-scope model --cf"
    args=(train --rates 100mbit --servers 2 --workers 4 --repeats 1 --steps 1000
          --eval-every 20 --methods static-10,static-100,static-1000
          --add-method "static-10-model=$m 10" --add-method "static-100-model=$m 100"
          --add-method "static-1000-model=$m 1000") ;;
topk-scope-cnn)
    m="--topk-scope model"
    args=(train --net loopback --servers 2 --workers 4 --repeats 1 --steps 600 --eval-every 50
          --target 0.86 --also-targets 0.80,0.84,0.88 --iperf 0
          --methods static-10,static-100,gravac-exp
          --add-method "static-10-model=--method static --cf 10 $m"
          --add-method "static-100-model=--method static --cf 100 $m"
          --add-method "gravac-exp-model=--method gravac-exp --theta-max 1000 --theta-min 10 \
--epsilon 0.45 --omega 0.01 --window 100 $m")
    job=(--model cnn --dataset fashion-mnist --batch 64 --lr 0.05 --momentum 0.9
         --lr-schedule step:450) ;;
conns)
    args=(train --rates 1gbit --servers 2 --workers 4 --repeats 1 --steps 300
          --eval-every 300 --methods dense,static-10
          --add-method "dense-c2=--method dense --conns-per-server 2"
          --add-method "dense-c4=--method dense --conns-per-server 4"
          --add-method "static-10-c2=--method static --cf 10 --conns-per-server 2"
          --add-method "static-10-c4=--method static --cf 10 --conns-per-server 4") ;;
downlink-scaling)
    # one invocation per W (each makes its own namespaces), then one table
    mkdir -p "$out"
    for w in 2 4 8 16; do
        a=(train --rates 100mbit --servers 2 --workers "$w" --repeats 1 --steps 60
           --eval-every 60 --iperf 0 --no-plots
           --methods static-10,static-10-union,static-100,static-100-union)
        printf '+ %q' "$bin/gravac-bench" "${a[@]}" --out "$out/w$w" "$@"
        echo
        "$bin/gravac-bench" "${a[@]}" --out "$out/w$w" "$@" || exit 1
    done
    exec /usr/bin/python3 "$root/scripts/downlink-scaling.py" "$out"/w2 "$out"/w4 "$out"/w8 \
        "$out"/w16 ;;
overlap)
    # issue 17 (3): at 1 Gbit/s, 1 server, 1 worker, dense: the iteration with --overlap and
    # with --no-overlap against compute alone (gravac-worker --standalone, same job) and
    # communication alone (--comm-only: the same pushes and updates, no compute); one
    # invocation per job, then one table (docs/ps-bench.md section 6)
    mkdir -p "$out"
    for jb in mlp-wide:2048:64 mlp-wide:2048:256 mlp-wide:2048:1024 mlp:256,128:64 \
        mlp:256,128:1024; do
        IFS=: read -r jn widths batch <<<"$jb"
        d=$out/$jn-b$batch
        rm -rf "$d/runs"
        mkdir -p "$d"
        j=(--model mlp --widths "$widths" --batch "$batch" --lr 0.1 --momentum 0.815
           --dataset fashion-mnist)
        "$bin/gravac-worker" --standalone "${j[@]}" --steps 100 --eval-every 100000 \
            --quiet >"$d/standalone.log" 2>&1 || { cat "$d/standalone.log" >&2; exit 1; }
        # ms per iteration of compute alone, from "... of B ... N samples/s training"
        sed -n 's/.* \([0-9.]*\) samples\/s training.*/\1/p' "$d/standalone.log" |
            awk -v b="$batch" '{ printf "%.3f\n", 1000 * b / $1 }' >"$d/standalone.txt"
        a=(train --rates 1gbit --servers 1 --workers 1 --repeats 2 --steps 150
           --eval-every 100000 --target 0.99 --also-targets 0.5 --no-plots --methods ""
           --add-method "overlap=--method dense --overlap"
           --add-method "sequential=--method dense --no-overlap"
           --add-method "comm-only=--method dense --comm-only")
        printf '+ %q' "$bin/gravac-bench" "${a[@]}" --out "$d" "$@" -- "${j[@]}"
        echo
        "$bin/gravac-bench" "${a[@]}" --out "$d" "$@" -- "${j[@]}" || exit 1
        grep -h "summary: overlap:" "$d"/runs/*/overlap/r0/worker0.log 2>/dev/null |
            sed 's/.*overlap: \([0-9]* of [0-9]*\) pushes.*/\1/' >"$d/early.txt" || true
    done
    exec /usr/bin/python3 "$root/scripts/overlap-table.py" "$out"/mlp-wide-b64 \
        "$out"/mlp-wide-b256 "$out"/mlp-wide-b1024 "$out"/mlp-b64 "$out"/mlp-b1024 ;;
*) echo "bench-train: unknown configuration '$name'" >&2; exit 2 ;;
esac
mkdir -p "$out"
rm -rf "$out/runs"
printf '+ %q' "$bin/gravac-bench"
printf ' %q' "${args[@]}" --out "$out" "$@" ${job[@]+-- "${job[@]}"}
echo
exec "$bin/gravac-bench" "${args[@]}" --out "$out" "$@" ${job[@]+-- "${job[@]}"}
