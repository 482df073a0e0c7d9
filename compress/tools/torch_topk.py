#!/usr/bin/env python3
"""torch_topk.py: the baseline for the CUDA top-k of gravac-bench compress --device cuda.

Times torch.topk on the same GPU for the same n and CF as the C bench (k = max(1, n // CF)),
two ways: topk of a precomputed |x| (the selection alone), and abs + topk + gather of the signed
values (what GRACE's top-k compressor does per call). Median of --reps runs, CUDA-event timed.

    python3 compress/tools/torch_topk.py --n 2.5e7 --cf 1000
    ./build/bin/gravac-bench compress --device cuda --sizes 2.5e7 --cfs 1000 --compressors topk
"""
import argparse
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=float, default=2.5e7)
    ap.add_argument("--cf", type=float, default=1000)
    ap.add_argument("--reps", type=int, default=21)
    args = ap.parse_args()
    n = int(args.n)
    k = max(1, int(n // args.cf))
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=gen) * 0.01
    ax = x.abs()

    def select_only():
        torch.topk(ax, k, sorted=False)

    def compressor():
        _, idx = torch.topk(x.abs(), k, sorted=False)
        return x[idx], idx

    t_sel = timed(select_only, args.reps)
    t_cmp = timed(compressor, args.reps)
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: n {n} cf {args.cf:g} "
          f"k {k}")
    print(f"torch.topk(|x|)           {t_sel:8.3f} ms  {n * 4 / t_sel / 1e6:7.1f} GB/s input")
    print(f"abs + topk + gather       {t_cmp:8.3f} ms  {n * 4 / t_cmp / 1e6:7.1f} GB/s input")


if __name__ == "__main__":
    main()
