#!/usr/bin/env python3
"""torch_topk.py: the baseline for the CUDA top-k of gravac-bench compress --device cuda.

Times torch.topk on the same GPU for the same n and CF as the C bench (k = max(1, n // CF)),
two ways: topk of a precomputed |x| (the selection alone), and abs + topk + gather of the signed
values (what GRACE's top-k compressor does per call). Median of --reps runs, CUDA-event timed.
--n and --cf take comma-separated lists. --copy-bw also times a device-to-device copy of
--copy-mib MiB (bytes read + bytes written over the time: the device's copy bandwidth, from which
scripts/device-check.sh derives the memory-bandwidth bound of one read of the input).

    python3 compress/tools/torch_topk.py --n 2.5e7 --cf 1000
    ./build/bin/gravac-bench compress --device cuda --sizes 2.5e7 --cfs 1000 --compressors topk
    python3 compress/tools/torch_topk.py --n 2.5e7,1e8 --cf 10,100,1000 --copy-bw --json
"""
import argparse
import json
import statistics

import torch


def timed(fn, reps):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # warm-up (allocator, kernels)
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(stop))
    return statistics.median(out)


def floats(text):
    return [float(v) for v in text.split(",") if v]


def copy_bandwidth(mib, reps):
    """Median device-to-device copy of `mib` MiB: (bytes read + written) / time, in GB/s."""
    n = mib * (1 << 20) // 4
    src = torch.empty(n, device="cuda", dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    ms = timed(lambda: dst.copy_(src), reps)
    return {"bytes": n * 4, "ms": ms, "gbs": 2 * n * 4 / ms / 1e6}


def run_one(n, cf, reps):
    k = max(1, int(n // cf))
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=gen) * 0.01
    ax = x.abs()

    def select_only():
        torch.topk(ax, k, sorted=False)

    def compressor():
        _, idx = torch.topk(x.abs(), k, sorted=False)
        return x[idx], idx

    t_sel = timed(select_only, reps)
    t_cmp = timed(compressor, reps)
    return {"n": n, "cf": cf, "k": k, "select_ms": t_sel, "compressor_ms": t_cmp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=floats, default=[2.5e7])
    ap.add_argument("--cf", type=floats, default=[1000])
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--copy-bw", action="store_true", help="also time a device-to-device copy")
    ap.add_argument("--copy-mib", type=int, default=1024)
    ap.add_argument("--json", action="store_true", help="one JSON document instead of text")
    args = ap.parse_args()
    doc = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name(), "reps": args.reps, "rows": []}
    if args.copy_bw:
        doc["copy"] = copy_bandwidth(args.copy_mib, args.reps)
        torch.cuda.empty_cache()
    for n in args.n:
        for cf in args.cf:
            doc["rows"].append(run_one(int(n), cf, args.reps))
    if args.json:
        print(json.dumps(doc))
        return
    for r in doc["rows"]:
        n, t_sel, t_cmp = r["n"], r["select_ms"], r["compressor_ms"]
        print(f"torch {doc['torch']} on {doc['device']}: n {n} cf {r['cf']:g} k {r['k']}")
        print(f"torch.topk(|x|)           {t_sel:8.3f} ms  {n * 4 / t_sel / 1e6:7.1f} GB/s input")
        print(f"abs + topk + gather       {t_cmp:8.3f} ms  {n * 4 / t_cmp / 1e6:7.1f} GB/s input")
    if "copy" in doc:
        c = doc["copy"]
        print(f"device copy of {c['bytes'] >> 20} MiB  {c['ms']:8.3f} ms  {c['gbs']:7.1f} GB/s "
              f"(read + write)")


if __name__ == "__main__":
    main()
