#!/usr/bin/env python3
"""matrix-table.py: the tables of issue 15's matrix (docs/results.md section 12) from the
train.json files of `scripts/bench-train.sh matrix`, one per job.

    scripts/matrix-table.py [--targets JOB=T1,T2,...] [--rerun DIR] [--csv OUT] DIR/mlp ...

--rerun DIR (repeatable): DIR/<job>/train.json holds later runs of some methods of the same
jobs (a method re-measured after a change, `bench-train.sh matrix-JOB -- --methods auto`): they
take those methods' places, and the runs they replace stay in the tables as "METHOD (before)".

For every job, rate and target: each method's mean time to the target over the repeats (the
first evaluation at or above it, training time, evaluations excluded; '-' when a repeat missed
it), auto's time over the best static CF's and over gravac-exp's, and at the budget each
method's accuracy; then the criteria, checked: auto within 1.3x of the best static (goal 1.0x)
and no slower than gravac-exp at every target, its accuracy within 0.5 points of dense's, and at
1 Gbit/s, where compression does not pay (no static CF reaches the target sooner than the faster
of dense and dense-fp16), no more than 5 % slower than that faster one. Targets default to the
bench's (the JSON's target and more targets)."""
import argparse
import json
import math
import os
import sys

STATIC = ("static-",)


def load(path):
    with open(os.path.join(path, "train.json")) as f:
        return json.load(f)


def first_at(evals, target):
    for it, train_s, _wall, acc in evals:
        if acc >= target - 1e-12:
            return it, train_s
    return None


def agg(runs, target):
    """Mean time and iterations to target over the repeats; None when any repeat missed."""
    ts, its = [], []
    for r in runs:
        if not r["ok"]:
            return None
        hit = first_at(r["evaluations"], target)
        if hit is None:
            return None
        its.append(hit[0])
        ts.append(hit[1])
    if not ts:
        return None
    return sum(ts) / len(ts), sum(its) / len(its)


def fmt_t(v):
    return "-" if v is None else f"{v[0]:.1f}"


def merge_rerun(j, later):
    """j with the methods of `later` (same job and settings) replaced by its runs."""
    if later["setup"]["job"] != j["setup"]["job"] or later["setup"]["steps"] != j["setup"]["steps"]:
        raise SystemExit("matrix-table: a re-run of another job or budget")
    new = {m["label"] for m in later["setup"]["methods"]}
    methods = []
    for m in j["setup"]["methods"]:
        if m["label"] in new:
            methods.append(dict(m, label=m["label"] + " (before)"))
    methods = [m for m in j["setup"]["methods"] if m["label"] not in new] + methods
    methods += later["setup"]["methods"]
    runs = [dict(r, method=r["method"] + " (before)") if r["method"] in new else r
            for r in j["runs"]] + later["runs"]
    setup = dict(j["setup"], methods=methods)
    lm = later["machine"]
    note = (f"{', '.join(sorted(new))} re-run in a later invocation (load average "
            f"{lm['load_before'][0]:.1f} before, {lm['load_after'][0]:.1f} after)")
    return dict(j, setup=setup, runs=runs, rerun_note=note)


def job_tables(name, j, targets, out, csvrows):
    rates = [r["rate"] if isinstance(r, dict) else r for r in j["setup"]["rates"]]
    methods = [m["label"] for m in j["setup"]["methods"]]
    runs = {}
    for r in j["runs"]:
        runs.setdefault((r["rate"], r["method"]), []).append(r)
    m = j["machine"]
    out.append(f"### {name}\n")
    out.append(f"job: `{j['setup']['job']}`; budget {j['setup']['steps']} iterations, "
               f"evaluation every {j['setup']['eval_every']}; {j['setup']['repeats']} repeat(s); "
               f"load average {m['load_before'][0]:.1f} before, {m['load_after'][0]:.1f} after"
               + (f"; {j['rerun_note']}" if "rerun_note" in j else "") + "\n")
    checks = []
    for rate in rates:
        out.append(f"**{rate}**: time to target [s] (mean over repeats; iterations in brackets), "
                   "accuracy at the budget, ms per iteration\n")
        hdr = "| method | " + " | ".join(f"{100 * t:g} %" for t in targets) + \
            " | accuracy at budget | ms/it |"
        out.append(hdr)
        out.append("|" + "---|" * (len(targets) + 3))
        res = {}
        for meth in methods:
            rs = runs.get((rate, meth), [])
            cells = []
            for t in targets:
                a = agg(rs, t)
                res[(meth, t)] = a
                cells.append("-" if a is None else f"{a[0]:.1f} ({a[1]:.0f})")
            ok = [r for r in rs if r["ok"]]
            acc = sum(r["final_accuracy"] for r in ok) / len(ok) if ok else float("nan")
            ms = sum(1e3 * r["train_s"] / max(1, r["iterations"]) for r in ok) / len(ok) \
                if ok else float("nan")
            res[(meth, "acc")] = acc
            res[(meth, "ms")] = ms
            failed = len(rs) - len(ok)
            out.append(f"| {meth} | " + " | ".join(cells) +
                       f" | {100 * acc:.2f} %{' (' + str(failed) + ' failed)' if failed else ''}"
                       f" | {ms:.1f} |")
            for t in targets:
                a = res[(meth, t)]
                csvrows.append([name, rate, meth, t, "" if a is None else f"{a[0]:.3f}",
                                "" if a is None else f"{a[1]:.0f}", f"{acc:.4f}", f"{ms:.2f}"])
        out.append("")
        # criteria
        statics = [x for x in methods if x.startswith(STATIC)]
        for t in targets:
            auto = res.get(("auto", t))
            best = None
            for s in statics:
                a = res[(s, t)]
                if a is not None and (best is None or a[0] < best[1][0]):
                    best = (s, a)
            gx = res.get(("gravac-exp", t))
            dn = [res.get((d, t)) for d in ("dense", "dense-fp16")]
            dn = [d for d in dn if d is not None]
            fastest_dense = min(d[0] for d in dn) if dn else None
            row = {"job": name, "rate": rate, "target": t,
                   "auto": None if auto is None else auto[0],
                   "best_static": None if best is None else best[0],
                   "best_static_s": None if best is None else best[1][0],
                   "gravac_exp": None if gx is None else gx[0],
                   "fastest_dense": fastest_dense}
            checks.append(row)
        dacc = res.get(("auto", "acc"), float("nan")) - res.get(("dense", "acc"), float("nan"))
        checks.append({"job": name, "rate": rate, "acc_delta": dacc})
    return checks


def crit_table(checks, out):
    out.append("**Criteria** (auto's time over the best static CF's for the target, over "
               "gravac-exp's, over the faster dense method's; its accuracy at the budget minus "
               "dense's):\n")
    out.append("| job | rate | target | auto [s] | best static | auto / best static (<= 1.3) | "
               "auto / gravac-exp (<= 1) | compression pays? | auto / faster dense |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for c in checks:
        if "acc_delta" in c:
            continue
        a = c["auto"]
        bs = c["best_static_s"]
        r1 = "-" if a is None or bs is None else f"{a / bs:.2f}"
        if a is None:
            r1 = "auto missed it"
        elif bs is None:
            r1 = "no static reached it"
        gx = c["gravac_exp"]
        r2 = "-" if a is None else ("gravac-exp missed it" if gx is None else f"{a / gx:.2f}")
        fd = c["fastest_dense"]
        pays = "-"
        if fd is not None and bs is not None:
            pays = "yes" if bs < fd else "no"
        elif fd is None and bs is not None:
            pays = "yes (dense missed it)"
        r3 = "-" if a is None or fd is None else f"{a / fd:.2f}"
        out.append(f"| {c['job']} | {c['rate']} | {100 * c['target']:g} % | "
                   f"{'-' if a is None else f'{a:.1f}'} | "
                   f"{'-' if c['best_static'] is None else c['best_static']} | {r1} | {r2} | "
                   f"{pays} | {r3} |")
    out.append("")
    out.append("| job | rate | auto's accuracy at the budget minus dense's (>= -0.5 points) |")
    out.append("|---|---|---|")
    for c in checks:
        if "acc_delta" in c:
            out.append(f"| {c['job']} | {c['rate']} | {100 * c['acc_delta']:+.2f} |")
    out.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", action="append", default=[],
                    help="JOB=T1,T2,... (fractions or percentages)")
    ap.add_argument("--csv", help="write the per-method rows here")
    ap.add_argument("--rerun", action="append", default=[],
                    help="DIR whose DIR/<job>/train.json replaces some methods' runs")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    tmap = {}
    for s in a.targets:
        k, v = s.split("=", 1)
        tmap[k] = [float(x) / (100.0 if float(x) > 1 else 1.0) for x in v.split(",")]
    out, allchecks, csvrows = [], [], []
    for d in a.dirs:
        name = os.path.basename(os.path.normpath(d))
        j = load(d)
        for rd in a.rerun:
            if os.path.exists(os.path.join(rd, name, "train.json")):
                j = merge_rerun(j, load(os.path.join(rd, name)))
        targets = tmap.get(name) or sorted(set(
            [j["setup"]["target_accuracy"]] + list(j["setup"]["also_targets"])))
        allchecks += job_tables(name, j, targets, out, csvrows)
    crit_table(allchecks, out)
    print("\n".join(out))
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("job,rate,method,target,time_s,iterations,final_accuracy,ms_per_iter\n")
            for r in csvrows:
                f.write(",".join(str(x) for x in r) + "\n")


if __name__ == "__main__":
    sys.exit(main())
