"""bench_torch_tta.py: time and steps to a target accuracy of PyTorch jobs, gravac against DDP,
at a shaped rate (bench_torch.py ddp). Every method of every model runs in one invocation, on
the same namespaces and links: gravac (S gravac-server processes and W workers running the
example, through gravac.torch) with dense, static CFs, GraVAC and the default controller, and
DDP over gloo (W workers of torch_ddp_train.py) dense, with the fp16 hook and with PowerSGD.
A run stops at the target (worker 0 evaluates every --eval-every steps on the first
--eval-limit test samples) or at --max-steps / --max-minutes; time is worker 0's train_s at
the first evaluation at or above the target (evaluations left out, start-up too).

With --repeats N every repeat runs every model and method in turn (so a change of the shared
machine's speed during the invocation falls on all of them alike), and the summary gives each
method's median time and the median of its ratios to DDP dense and to PowerSGD, each ratio taken
within one repeat."""

import argparse
import json
import os
import signal
import sys
import time

import bench_torch_net as bn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    # example script, its arguments (both systems), the DDP trainer's arguments
    "resnet18": ("fmnist_resnet18.py",
                 ["--batch", "32", "--lr", "0.05", "--optimizer", "sgd", "--stem", "torchvision"],
                 ["--model", "resnet18", "--batch", "32", "--lr", "0.05", "--optimizer", "sgd",
                  "--stem", "torchvision"]),
    "lstm": ("fortunes_lstm.py",
             ["--batch", "16", "--seq-len", "32", "--hidden", "512", "--lr", "0.003",
              "--optimizer", "adam"],
             ["--model", "lstm", "--batch", "16", "--seq-len", "32", "--hidden", "512",
              "--lr", "0.003", "--optimizer", "adam"]),
}

GRAVAC = {
    "gravac-dense": ["--method", "dense"],
    "gravac-static-10": ["--method", "static", "--cf", "10"],
    "gravac-static-100": ["--method", "static", "--cf", "100"],
    "gravac-graVAC": ["--method", "gravac-exp", "--epsilon", "0.3", "--window", "50"],
    "gravac-default": [],
    "gravac-auto": ["--method", "auto"],
}
DEFAULT_METHODS = list(GRAVAC)  # the methods above run by default; these only when named
GRAVAC.update({
    "gravac-static-30": ["--method", "static", "--cf", "30"],
    # sparse values as f32 (before fp16 became the default; docs/results.md section 15)
    "gravac-auto-f32": ["--method", "auto", "--no-fp16"],
    "gravac-static-30-f32": ["--method", "static", "--cf", "30", "--no-fp16"],
    "gravac-static-100-f32": ["--method", "static", "--cf", "100", "--no-fp16"],
})
DDP = {"ddp-dense": ["--hook", "dense"], "ddp-fp16": ["--hook", "fp16"],
       "ddp-powersgd": ["--hook", "powersgd", "--rank-r", "2"]}


def records(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def to_target(recs, target):
    ev = [r for r in recs if r.get("type") == "eval" and r.get("accuracy") is not None]
    for r in ev:
        if r["accuracy"] >= target:
            return r["train_s"], r["step"], ev
    return None, None, ev


def env_for(extra):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(ROOT, "build", "python") + ":" +
               os.path.join(ROOT, "examples"))
    env.pop("GRAVAC_LIBRARY", None)
    env.update(extra)
    return env


def gv_env(args_list):
    """gravac options as the GV_* variables libgravac reads."""
    env, i = {}, 0
    while i < len(args_list):
        k = args_list[i][2:]
        if i + 1 < len(args_list) and not args_list[i + 1].startswith("--"):
            v, i = args_list[i + 1], i + 2
        elif k.startswith("no-"):  # a switch: --no-x is false, --x true
            k, v, i = k[3:], "false", i + 1
        else:
            v, i = "true", i + 1
        env["GV_" + k.upper().replace("-", "_")] = v
    return env


def run_gravac(net, a, model, name, margs, rundir, bin_dir):
    S, W = a.servers, a.workers
    servers = ",".join("%s:7000" % net.ip(s) for s in range(S))
    common = ["--num-workers", str(W), "--insecure", "--connect-timeout", "120s",
              "--model", "external", "--optimizer", "caller"] + margs
    procs = []
    for s in range(S):
        cmd = [os.path.join(bin_dir, "gravac-server"), "--rank", str(s), "--servers", servers,
               "--bind", "0.0.0.0:7000", "--advertise", net.ip(s),
               "--decision-log", os.path.join(rundir, "decisions.jsonl")] + common
        procs.append(net.popen(s, cmd, env_for({}), os.path.join(rundir, "server%d.log" % s)))
    script, ex_args, _ = MODELS[model]
    for w in range(W):
        env = env_for({"GV_RANK": str(w), "GV_SERVERS": servers, "GV_NUM_WORKERS": str(W),
                       "GV_INSECURE": "true", "GV_CONNECT_TIMEOUT": "120s",
                       "GV_METRICS_FILE": os.path.join(rundir, "worker%r.jsonl")})
        env.update(gv_env(margs))
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "examples", script)] + ex_args + [
            "--steps", str(a.max_steps), "--eval-every", str(a.eval_every), "--eval-limit",
            str(a.eval_limit), "--target", str(a.target[model]), "--progress-every", "10"]
        procs.append(net.popen(S + w, cmd, env, os.path.join(rundir, "worker%d.log" % w)))
    return procs, os.path.join(rundir, "worker0.jsonl")


def run_ddp(net, a, model, name, margs, rundir):
    W = a.workers
    _, _, ddp_args = MODELS[model]
    procs = []
    for w in range(W):
        env = env_for({"RANK": str(w), "WORLD_SIZE": str(W), "MASTER_ADDR": net.ip(0),
                       "MASTER_PORT": "29555", "GLOO_SOCKET_IFNAME": "eth0"})
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "torch_ddp_train.py")] + \
            ddp_args + margs + ["--steps", str(a.max_steps), "--eval-every",
                                str(a.eval_every), "--eval-limit", str(a.eval_limit),
                                "--target", str(a.target[model]), "--metrics-file",
                                os.path.join(rundir, "worker0.jsonl")]
        procs.append(net.popen(w, cmd, env, os.path.join(rundir, "worker%d.log" % w)))
    return procs, os.path.join(rundir, "worker0.jsonl")


def wait(procs, minutes):
    end = time.time() + 60 * minutes
    while time.time() < end:
        if all(p.poll() is not None for p in procs):
            return True
        time.sleep(1)
    return False


def main(args, rest):
    ap = argparse.ArgumentParser(prog="bench_torch.py ddp")
    ap.add_argument("--rate", default="100mbit")
    ap.add_argument("--burst", type=int, default=0,
                    help="tbf bucket in bytes (0: 4 ms at the rate, at least 64 KiB)")
    ap.add_argument("--models", default="resnet18,lstm")
    ap.add_argument("--methods", default=",".join(DEFAULT_METHODS + list(DDP)))
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--max-minutes", type=float, default=20)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-limit", type=int, default=1000)
    ap.add_argument("--target-resnet18", type=float, default=0.70)
    ap.add_argument("--target-lstm", type=float, default=0.35)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args(rest)
    if a.repeats < 1:
        ap.error("--repeats must be at least 1")
    a.target = {"resnet18": a.target_resnet18, "lstm": a.target_lstm}
    out = args.out or os.path.join(ROOT, "build", "bench-results", "torch-ddp")
    os.makedirs(out, exist_ok=True)
    if os.geteuid() != 0:
        print("bench_torch.py ddp: network namespaces need root", file=sys.stderr)
        return 2
    bn.remove_stale()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    n = a.servers + a.workers
    net = bn.Net(n)
    results = []
    cmdline = "scripts/bench_torch.py ddp " + " ".join(rest)
    try:
        net.shape(a.rate, burst=a.burst)
        for rep, model, name in ((r, m, n) for r in range(a.repeats)
                                 for m in a.models.split(",") for n in a.methods.split(",")):
            rundir = os.path.join(out, "runs", model, name)
            if a.repeats > 1:
                rundir = os.path.join(rundir, "r%d" % rep)
            os.makedirs(rundir, exist_ok=True)
            for f in os.listdir(rundir):
                os.remove(os.path.join(rundir, f))
            load0 = os.getloadavg()[0]
            t0 = time.time()
            if name in GRAVAC:
                procs, mfile = run_gravac(net, a, model, name, GRAVAC[name], rundir, args.bin)
            else:
                procs, mfile = run_ddp(net, a, model, name, DDP[name], rundir)
            finished = wait(procs, a.max_minutes)
            bn.stop(procs)
            recs = records(mfile)
            tt, st, ev = to_target(recs, a.target[model])
            its = [r for r in recs if r.get("type") == "iter"]
            ms = None
            if len(its) > 12:
                ms = 1e3 * (its[-1]["train_s"] - its[10]["train_s"]) / (
                    its[-1]["iter"] - its[10]["iter"])
            row = {"model": model, "method": name, "repeat": rep, "target": a.target[model],
                   "time_to_target_s": tt, "steps_to_target": st,
                   "last_accuracy": ev[-1]["accuracy"] if ev else None,
                   "last_step": ev[-1]["step"] if ev else None, "ms_per_step": ms,
                   "finished": finished, "wall_s": time.time() - t0,
                   "rc": [p.returncode for p in procs], "load": [load0, os.getloadavg()[0]]}
            if name.startswith("gravac"):
                cfs = {}
                for r in its:
                    cfs[r.get("cf")] = cfs.get(r.get("cf"), 0) + 1
                row["iterations_per_cf"] = cfs
                if its:
                    row["bytes_sent_per_step"] = sum(r["bytes_sent"] for r in its) / len(its)
                    row["bytes_recv_per_step"] = sum(r["bytes_recv"] for r in its) / len(its)
            results.append(row)
            print(json.dumps(row), flush=True)
            with open(os.path.join(out, "tta.json"), "w") as f:
                json.dump({"command": cmdline, "rate": a.rate, "burst": a.burst,
                           "servers": a.servers, "workers": a.workers, "repeats": a.repeats,
                           "results": results, "summary": summary(results)}, f, indent=1)
    except KeyboardInterrupt:
        print("bench_torch.py ddp: interrupted", file=sys.stderr)
    finally:
        net.destroy()
    table(results, out, cmdline)
    return 0


def ratio(num, den):
    return num / den if num and den else None


def repeat_time(results, model, rep, method):
    """method's time to target in repeat rep of model (None: not run or not reached)."""
    for b in results:
        if b["model"] == model and b["method"] == method and b.get("repeat", 0) == rep:
            return b["time_to_target_s"]
    return None


def median(v):
    v = sorted(v)
    n = len(v)
    return None if n == 0 else v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def summary(results):
    """Per model and method over the repeats: median time to target (of the repeats that reached
    it), how many reached it, and the median, min and max of the ratios of DDP dense's and
    PowerSGD's times to the method's, each taken within one repeat (a repeat where either side
    missed the target gives no ratio)."""
    out = []
    keys = []
    for r in results:
        if (r["model"], r["method"]) not in keys:
            keys.append((r["model"], r["method"]))
    for model, method in keys:
        rows = [r for r in results if r["model"] == model and r["method"] == method]
        row = {"model": model, "method": method, "repeats": len(rows),
               "reached": sum(1 for r in rows if r["time_to_target_s"]),
               "median_time_s": median([r["time_to_target_s"] for r in rows
                                        if r["time_to_target_s"]])}
        for ref, key in (("ddp-dense", "vs_dense"), ("ddp-powersgd", "vs_powersgd")):
            ratios = [ratio(repeat_time(results, model, r.get("repeat", 0), ref),
                            r["time_to_target_s"]) for r in rows]
            ratios = [q for q in ratios if q is not None]
            row[key] = ({"median": median(ratios), "min": min(ratios), "max": max(ratios),
                         "n": len(ratios)} if ratios else None)
        out.append(row)
    return out


def table(results, out, cmdline):
    lines = ["# " + cmdline, "%-9s %-18s %3s %10s %7s %9s %9s %8s %9s %9s" % (
        "model", "method", "rep", "time[s]", "steps", "ms/step", "last acc", "at step",
        "vs dense", "vs psgd")]
    for model in sorted(set(r["model"] for r in results)):
        rows = [r for r in results if r["model"] == model]
        for r in rows:
            t, rep = r["time_to_target_s"], r.get("repeat", 0)
            vd = ratio(repeat_time(results, model, rep, "ddp-dense"), t)
            vp = ratio(repeat_time(results, model, rep, "ddp-powersgd"), t)
            lines.append("%-9s %-18s %3d %10s %7s %9s %9s %8s %9s %9s" % (
                model, r["method"], r.get("repeat", 0), "%.1f" % t if t else "-",
                r["steps_to_target"] or "-",
                "%.0f" % r["ms_per_step"] if r["ms_per_step"] else "-",
                "%.2f%%" % (100 * r["last_accuracy"]) if r["last_accuracy"] else "-",
                r["last_step"] or "-", "%.2fx" % vd if vd else "-", "%.2fx" % vp if vp else "-"))
    if len(set(r.get("repeat", 0) for r in results)) > 1:
        def span(q):
            return "-" if q is None else "%.2fx (%.2f-%.2f, %d)" % (
                q["median"], q["min"], q["max"], q["n"])
        lines += ["", "over the repeats: median time of those that reached the target; median "
                  "ratio (min-max, repeats), each within one repeat",
                  "%-9s %-18s %7s %10s %-24s %-24s" % ("model", "method", "reached", "time[s]",
                                                       "vs dense", "vs psgd")]
        for s in summary(results):
            lines.append("%-9s %-18s %7s %10s %-24s %-24s" % (
                s["model"], s["method"], "%d/%d" % (s["reached"], s["repeats"]),
                "%.1f" % s["median_time_s"] if s["median_time_s"] else "-",
                span(s["vs_dense"]), span(s["vs_powersgd"])))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "tta.txt"), "w") as f:
        f.write(text + "\n")
