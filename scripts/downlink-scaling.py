#!/usr/bin/python3
"""downlink-scaling.py: one table from the gravac-bench train runs of
`scripts/bench-train.sh downlink-scaling` (one output directory per number of workers): bytes
per worker and iteration each way and the iteration time, per method, with the ratio to the
smallest W; the bounded (topk) and union downlinks side by side. Standard library only.

    scripts/downlink-scaling.py DIR...     (each DIR holds a train.json)
"""
import json
import sys


def load(d):
    with open(d + "/train.json") as f:
        j = json.load(f)
    w = j["setup"]["workers"]
    rows = {}
    for s in j["summary"]:
        if s.get("runs", 0) > 0:
            rows[s["method"]] = s
    return w, j["setup"]["network"], rows


def kib(b):
    return "%.1f KiB" % (b / 1024.0)


def main(dirs):
    runs = sorted((load(d) for d in dirs), key=lambda r: r[0])
    if not runs:
        print("downlink-scaling: no runs", file=sys.stderr)
        return 2
    methods = [m for m in runs[0][2]]
    base = {m: runs[0][2][m] for m in methods}
    print("network: %s; bytes per worker and iteration, iteration time (worker 0); "
          "x: ratio to W = %d" % (runs[0][1], runs[0][0]))
    print("| W | method | up | down | down/up | ms/iter | up x | down x | ms x |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w, _, rows in runs:
        for m in methods:
            r = rows.get(m)
            if r is None:
                print("| %d | %s | failed | | | | | | |" % (w, m))
                continue
            b = base[m]
            up, down, ms = (r["up_bytes_per_iter_worker"], r["down_bytes_per_iter_worker"],
                            r["ms_per_iter"])
            print("| %d | %s | %s | %s | %.2f | %.1f | %.2f | %.2f | %.2f |" % (
                w, m, kib(up), kib(down), down / up if up else 0, ms,
                up / b["up_bytes_per_iter_worker"], down / b["down_bytes_per_iter_worker"],
                ms / b["ms_per_iter"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
