#!/usr/bin/python3
"""bench_torch.py: the PyTorch binding's benchmarks (docs/torch.md, docs/results.md).

  bench_torch.py binding [--steps 400] [--repeats 3] [--methods dense,static-10]
      The binding's cost: the same MLP (784-256-128-10, Fashion-MNIST, batch 64, 1 server,
      2 workers on loopback) trained by gravac-worker (nn/'s C model) and by PyTorch through
      gravac.torch, interleaved in one invocation; per-iteration time from worker 0's metrics
      file (train_s over iterations 50..N), and what the Python side adds to each step
      (synchronize() minus the time inside libgravac).

  bench_torch.py ddp [--rate 100mbit] [--models resnet18,lstm] [--workers 4] [--servers 2]
                     [--repeats 1] [--burst BYTES] [--methods LIST]
      Time and steps to a target accuracy: the examples through gravac (dense, static CF,
      GraVAC, the default controller) against PyTorch DDP over gloo (dense, the fp16 hook, and
      PowerSGD with blocking allreduces in a fixed order), every process in its own network
      namespace behind a tc-tbf link (root). With --repeats N the methods take turns N times
      and a summary gives median ratios, each taken within one repeat. See bench_torch_tta.py,
      bench_torch_net.py and torch_ddp_train.py.

Results go to --out (default build/bench-results/torch-<name>): every run's output, the
metrics files, a JSON and a table. Run from the source tree with the build in build/.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path):
    recs = []
    if not os.path.exists(path):
        return recs
    with open(path) as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass
    return recs


def iter_time(path, skip=50):
    """Mean seconds per iteration of worker 0 over iterations skip..N (train_s excludes
    evaluations and start-up)."""
    it = [r for r in load(path) if r.get("type") == "iter"]
    if len(it) <= skip + 1:
        return None
    a, b = it[skip], it[-1]
    return (b["train_s"] - a["train_s"]) / (b["iter"] - a["iter"])


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run(cmd, log, env=None, timeout=1800):
    with open(log, "w") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout)
    return p.returncode


def binding(args):
    out = args.out or os.path.join(ROOT, "build", "bench-results", "torch-binding")
    os.makedirs(out, exist_ok=True)
    launch = os.path.join(args.bin, "gravac-launch")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []
    methods = {"dense": ["--method", "dense"], "static-10": ["--method", "static", "--cf", "10"],
               "gravac": ["--method", "gravac-exp"]}
    for rep in range(args.repeats):
        for m in args.methods.split(","):
            margs = methods[m]
            common = [launch, "--servers", "1", "--workers", "2", "--batch", "64"] + margs
            load0 = loadavg()
            gw = os.path.join(out, "gw-%s-%d-%%r.jsonl" % (m, rep))
            rc1 = run(common + ["--model", "mlp", "--steps", str(args.steps), "--quiet",
                                "--metrics-file", gw],
                      os.path.join(out, "gw-%s-%d.log" % (m, rep)), env)
            tw = os.path.join(out, "tw-%s-%d-%%r.jsonl" % (m, rep))
            tlog = os.path.join(out, "tw-%s-%d.log" % (m, rep))
            rc2 = run(common + ["--metrics-file", tw, "--", "/usr/bin/python3",
                                os.path.join(ROOT, "examples", "fmnist_mlp.py"), "--steps",
                                str(args.steps), "--batch", "64", "--progress-every", "100000"],
                      tlog, env)
            t_gw = iter_time(gw.replace("%r", "0"))
            t_tw = iter_time(tw.replace("%r", "0"))
            with open(tlog) as f:
                text = f.read()
            mm = re.search(r"binding: ([0-9.]+) ms per step in synchronize\(\), ([0-9.]+) ms of it "
                           r"in libgravac", text)
            sync_ms, lib_ms = (float(mm.group(1)), float(mm.group(2))) if mm else (None, None)
            row = {"method": m, "repeat": rep, "rc": [rc1, rc2], "gravac_worker_ms":
                   t_gw and 1e3 * t_gw, "torch_ms": t_tw and 1e3 * t_tw, "sync_ms": sync_ms,
                   "lib_ms": lib_ms, "load": [load0, loadavg()]}
            if t_gw and t_tw:
                row["ratio"] = t_tw / t_gw
            if sync_ms is not None and t_tw:
                row["binding_ms"] = sync_ms - lib_ms
                row["binding_share"] = (sync_ms - lib_ms) / (1e3 * t_tw)
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(os.path.join(out, "binding.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print("\n%-10s %3s %14s %12s %7s %12s %12s %9s %11s" % (
        "method", "rep", "gravac-worker", "torch+bind", "ratio", "sync[ms]", "libgravac",
        "binding", "load"))
    for r in rows:
        print("%-10s %3d %11.2f ms %9.2f ms %7.3f %12.3f %12.3f %8.2f%% %5.1f-%.1f" % (
            r["method"], r["repeat"], r["gravac_worker_ms"] or -1, r["torch_ms"] or -1,
            r.get("ratio", -1), r["sync_ms"] or -1, r["lib_ms"] or -1,
            100 * r.get("binding_share", -1), r["load"][0], r["load"][1]))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["binding", "ddp"])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--out", default=None)
    args, rest = ap.parse_known_args()
    if args.what == "binding":
        bp = argparse.ArgumentParser(prog="bench_torch.py binding")
        bp.add_argument("--steps", type=int, default=400)
        bp.add_argument("--repeats", type=int, default=3)
        bp.add_argument("--methods", default="dense,static-10")
        args.__dict__.update(vars(bp.parse_args(rest)))
        return binding(args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_torch_tta
    return bench_torch_tta.main(args, rest)


if __name__ == "__main__":
    sys.exit(main())
