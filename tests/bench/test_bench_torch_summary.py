#!/usr/bin/python3
"""test_bench_torch_summary.py: the repeats summary of `bench_torch.py ddp --repeats N`
(scripts/bench_torch_tta.py): ratios to DDP dense and PowerSGD taken within one repeat, medians
over the repeats, repeats that missed the target left out, and the table's rows and summary.
Synthetic results only: no namespaces, no torch."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import bench_torch_tta as tta  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def near(a, b):
    return a is not None and abs(a - b) < 1e-9


def row(method, rep, t, steps=100):
    return {"model": "lstm", "method": method, "repeat": rep, "time_to_target_s": t,
            "steps_to_target": steps if t else None, "ms_per_step": 100.0,
            "last_accuracy": 0.36, "last_step": steps}


# three repeats; the dense baseline is slower in repeat 1, gravac misses the target in repeat 2,
# PowerSGD in repeat 1
results = [row("gravac-default", 0, 20.0), row("ddp-dense", 0, 60.0), row("ddp-powersgd", 0, 30.0),
           row("gravac-default", 1, 25.0), row("ddp-dense", 1, 70.0), row("ddp-powersgd", 1, None),
           row("gravac-default", 2, None), row("ddp-dense", 2, 66.0), row("ddp-powersgd", 2, 33.0)]
s = {x["method"]: x for x in tta.summary(results)}
g = s["gravac-default"]
check(g["repeats"] == 3 and g["reached"] == 2, "repeats and reached: %r" % g)
check(near(g["median_time_s"], 22.5), "median time of the repeats that reached: %r" % g)
# within-repeat ratios 60/20 = 3.0 and 70/25 = 2.8: median 2.9 (the medians' ratio would be
# 66/22.5 = 2.93; repeat 2, where gravac missed the target, gives none)
vd = g["vs_dense"]
check(vd["n"] == 2 and near(vd["median"], 2.9) and near(vd["min"], 2.8) and near(vd["max"], 3.0),
      "vs dense: %r" % vd)
vp = g["vs_powersgd"]
check(vp["n"] == 1 and near(vp["median"], 1.5), "vs PowerSGD: only repeat 0 has both: %r" % vp)
d = s["ddp-dense"]
check(near(d["vs_dense"]["median"], 1.0) and d["vs_dense"]["n"] == 3, "dense vs itself: %r" % d)
check(near(tta.median([3.0, 1.0, 2.0]), 2.0) and tta.median([]) is None, "median")

with tempfile.TemporaryDirectory() as out:
    tta.table(results, out, "test")
    text = open(os.path.join(out, "tta.txt")).read()
    lines = text.splitlines()
    rep1 = [ln for ln in lines if ln.startswith("lstm") and "gravac-default" in ln and
            ln.split()[2] == "1"]
    check(len(rep1) == 1 and "2.80x" in rep1[0], "repeat 1's row uses repeat 1's dense: %r" % rep1)
    check("over the repeats" in text, "a summary with several repeats")
    summ = [ln for ln in lines[lines.index(next(x for x in lines if x.startswith("over"))):]
            if ln.startswith("lstm") and "gravac-default" in ln]
    check(len(summ) == 1 and "2/3" in summ[0] and "2.90x (2.80-3.00, 2)" in summ[0],
          "summary row: %r" % summ)
    tta.table(results[:3], out, "test")
    text = open(os.path.join(out, "tta.txt")).read()
    check("over the repeats" not in text and "3.00x" in text, "one repeat: no summary")

print("OK" if failures == 0 else "FAILED: %d" % failures)
sys.exit(1 if failures else 0)
