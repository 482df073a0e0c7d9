#!/usr/bin/env bash
# test_device_check.sh SRC_DIR BUILD_DIR: scripts/device-check.sh on a machine without a GPU.
# Packs this build; checks the tarball's size and, with its own ldd walk, that every packed ELF
# file resolves with only the pack and the base system (glibc, the NVIDIA driver; cuBLAS is the
# GPU machine's); runs packed programs with the pack's libraries; then the device half: without
# a GPU it skips each GPU part in one line and exits 0, with --require-gpu it fails, it stops on
# an nvidia-smi that sees a GPU the driver library does not, and on a library missing from the
# pack. SKIP (77) in a build without the CUDA plugins (the sanitizer build) or where a GPU is.
set -u
src=$1
bld=$2
if [ ! -e "$bld/bin/libgravac_nn_cuda.so" ]; then
    echo "SKIP: this build has no CUDA plugins (CUDA off): the pack is made from the release build"
    exit 77
fi
if [ -e /dev/nvidia0 ] || command -v nvidia-smi >/dev/null 2>&1; then
    echo "SKIP: a GPU is present; this test checks the no-GPU mode (run scripts/device-check.sh run)"
    exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
dc="$src/scripts/device-check.sh"

python3 "$src/scripts/device-check/selftest.py" || fail "the device half's parsers (selftest.py)"
# the plugins-only rebuild reads its source lists from compress/ and nn/ CMakeLists.txt
cmake -DGV_SRC="$src" -P "$src/scripts/device-check/plugins/sources.cmake" ||
    fail "scripts/device-check/plugins/sources.cmake no longer finds the plugins' sources"

# ---- the build-machine half ----
"$dc" pack --no-build --build-dir "$bld" --out "$tmp/pack.tar.gz" --stage "$tmp/stage" \
    >"$tmp/pack.log" 2>&1 || { cat "$tmp/pack.log"; fail "pack exited $?"; }
cat "$tmp/pack.log"
size=$(stat -c %s "$tmp/pack.tar.gz")
[ "$size" -lt $((60 << 20)) ] || fail "the pack is $size bytes (the device tool carries 64 MiB)"
[ ! -e "$tmp/stage" ] || fail "pack left its staging folder"
mkdir "$tmp/x"
tar -C "$tmp/x" -xzf "$tmp/pack.tar.gz" || fail "the tarball does not unpack"
p="$tmp/x/gravac-device"
for f in manifest.json env.sh bin/gravac-worker bin/gravac-server bin/gravac-bench \
    bin/libgravac_nn_cuda.so bin/libgravac_compress_cuda.so tests/test_compress_cuda \
    tests/test_nn_cuda tests/test_worker_runtime tests/test_e2e_gpu tests/test_rdma_device \
    tools/ib_write_bw tools/ib_send_lat tools/rdma tools/ip tools/torch_topk.py \
    lib/cuda/libcudart.so.13 data/train-images-idx3-ubyte.gz data/t10k-labels-idx1-ubyte.gz \
    src/scripts/device-check/plugins/CMakeLists.txt src/compress/cuda/topk.cu; do
    [ -e "$p/$f" ] || fail "the pack has no $f"
done
ls "$p"/lib/librxe-rdmav*.so >/dev/null 2>&1 || fail "the pack has no rxe verbs provider"

# Every ELF file: each library ldd names must resolve inside the pack, or be of the base system.
export LD_LIBRARY_PATH="$p/lib:$p/lib/cuda:$p/lib/compat"
base='^(linux-vdso\.so\.1|ld-linux[-a-z0-9_.]*\.so\.[0-9]+|lib(c|m|dl|pthread|rt|util|resolv|anl|mvec)\.so\.[0-9]+|libcuda\.so\.[0-9]+|libcublas(Lt)?\.so\.[0-9]+)$'
n=0
while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] || continue
    n=$((n + 1))
    out=$(ldd "$f" 2>&1)
    if echo "$out" | grep -q "version \`.*' not found"; then
        fail "${f#"$p"/}: $(echo "$out" | grep "not found" | head -1)"
    fi
    while read -r name arrow path _; do
        [ "$arrow" = "=>" ] || continue
        echo "$name" | grep -Eq "$base" && continue
        case "$path" in
        "$p"/*) ;;
        *) fail "${f#"$p"/} needs $name, which resolves to '$path', not to the pack" ;;
        esac
    done <<<"$out"
done < <(find "$p" -type f -print0)
[ $n -ge 40 ] || fail "only $n ELF files in the pack"
echo "ldd: $n packed ELF files resolve with only the pack and the base system"

# The packed programs run with the pack's libraries and read the packed data.
"$p/bin/gravac-worker" --standalone --model mlp --dataset fashion-mnist --data-dir "$p/data" \
    --steps 3 --eval-limit 200 --quiet >"$tmp/w.log" 2>&1 ||
    { cat "$tmp/w.log"; fail "the packed gravac-worker failed on the packed data"; }
grep -q "20000" <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['data']['train'])" \
    "$p/manifest.json") || fail "the manifest does not say 20000 training images"
"$p/tools/ib_write_bw" --version 2>&1 | grep -q '^Version' || fail "packed ib_write_bw does not run"
"$p/tools/rdma" -V | grep -q iproute2 || fail "packed rdma does not run"
"$p/tools/ip" -V | grep -q iproute2 || fail "packed ip does not run"
unset LD_LIBRARY_PATH

# ---- the device half without a GPU ----
run() { # run NAME PACK ARGS...: the device half into $tmp/NAME; sets rc
    local name=$1 pack=$2
    shift 2
    "$dc" run --pack "$pack" --out "$tmp/$name" --work "$tmp/work-$name" "$@" \
        >"$tmp/$name.log" 2>&1
    rc=$?
    sed "s/^/  $name | /" "$tmp/$name.log"
}
want() { # want NAME REGEX: the run's output has a line matching REGEX
    grep -Eq "$2" "$tmp/$1.log" || fail "$1: no line matching '$2'"
}
status() { # status NAME PART: that part's status in the run's JSON
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['parts'][sys.argv[2]]['status'])" \
        "$tmp/$1/device-check.json" "$2"
}

run nogpu "$tmp/pack.tar.gz" --rdma detect
[ $rc -eq 0 ] || fail "nogpu: exit $rc without a GPU (want 0)"
want nogpu '^env: .*nvcc'
want nogpu '^skip gpu: none found \(.*no /dev/nvidia'
want nogpu '^pack: every packed program and library resolves'
want nogpu '^host: the packed gravac-worker trains on the CPU'
for part in plugins gpu_tests topk training; do
    want nogpu "^skip $part: no GPU\$"
    [ "$(status nogpu $part)" = skipped ] || fail "nogpu: $part is not 'skipped' in the JSON"
done
want nogpu '^skip rdma: '
for part in pack host; do
    [ "$(status nogpu $part)" = ok ] || fail "nogpu: $part is not 'ok' in the JSON"
done
for f in device-check.json device-check.txt device-check-logs.tar.gz; do
    [ -s "$tmp/nogpu/$f" ] || fail "nogpu: no $f in --out"
done

run required "$p" --rdma off --require-gpu
[ $rc -eq 1 ] || fail "required: exit $rc with --require-gpu and no GPU (want 1)"
want required '^gpu: FAILED: no usable GPU'

# nvidia-smi sees a GPU but the driver's library is missing: stop the GPU parts, exit 1
mkdir "$tmp/fakebin"
printf '#!/bin/sh\necho "Fake GPU, 550.54.15, 81559 MiB, 00000000:00:05.0"\n' \
    >"$tmp/fakebin/nvidia-smi"
chmod +x "$tmp/fakebin/nvidia-smi"
PATH="$tmp/fakebin:$PATH" run fakesmi "$p" --rdma off
[ $rc -eq 1 ] || fail "fakesmi: exit $rc (want 1)"
want fakesmi '^gpu: FAILED: no usable GPU: .*libcuda\.so\.1 not loadable.*found: nvidia-smi lists 1 GPU'
want fakesmi '^skip gpu_tests: no usable GPU'

# a library missing from the pack: named, and nothing else runs
cp -a "$p" "$tmp/brokenpack"
rm "$tmp/brokenpack/lib/libprotobuf-c.so.1"
run broken "$tmp/brokenpack" --rdma off
[ $rc -eq 1 ] || fail "broken: exit $rc with a library missing (want 1)"
want broken '^pack: FAILED: a library is not found'
want broken 'bin/gravac-worker: libprotobuf-c\.so\.1 not found'
want broken '^device-check: stopped: the packed programs cannot run here'
echo "device-check: pack and no-GPU mode ok"
