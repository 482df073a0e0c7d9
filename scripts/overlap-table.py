#!/usr/bin/python3
"""overlap-table.py: the table of `scripts/bench-train.sh overlap` (docs/ps-bench.md section 6).
Each DIR holds one gravac-bench train invocation (train.json: methods overlap, sequential,
comm-only) and standalone.txt (the job's compute alone, ms per iteration, from gravac-worker
--standalone). Per job: compute, communication (comm-only: the same pushes and updates, no
compute), the iteration with and without overlap, and each against max(compute, communication).
Standard library only.

    scripts/overlap-table.py DIR...
"""
import json
import sys


def load(d):
    with open(d + "/train.json") as f:
        j = json.load(f)
    ms = {}
    for r in j["runs"]:
        if r.get("ok"):
            ms.setdefault(r["method"], []).append(r["worker0_ms_per_iter"])
    with open(d + "/standalone.txt") as f:
        alone = float(f.read().split()[0])
    return j, ms, alone


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main(dirs):
    print("| job | compute alone | compute in the run | communication (comm-only) | "
          "no overlap | overlap | no overlap / max | overlap / max | pushes during backward |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        j, ms, alone = load(d)
        label = d.rstrip("/").split("/")[-1]
        try:
            comm = mean([m["total"] for m in ms["comm-only"]])
            seq = mean([m["total"] for m in ms["sequential"]])
            ovl = mean([m["total"] for m in ms["overlap"]])
            run_cpu = mean([m["compute"] for m in ms["sequential"]])
        except KeyError as e:
            print("| %s | missing method %s |" % (label, e))
            continue
        bound = max(alone, comm)
        early = "-"
        try:
            with open(d + "/early.txt") as f:
                early = f.read().strip()
        except OSError:
            pass
        print("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.2fx | %.2fx | %s |" % (
            label, alone, run_cpu, comm, seq, ovl, seq / bound, ovl / bound, early))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
