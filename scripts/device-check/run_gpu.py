"""run_gpu.py: the GPU parts of the device half (run.py): the CUDA plugins (packed, or rebuilt
with this machine's nvcc when the packed ones cannot run), the GPU tests, the top-k against
torch.topk and the memory-bandwidth bound, and the MLP and CNN trained on the GPU against the
same job on the CPU. Each part records its numbers in the Check (run.py) it is given."""
import glob
import json
import os
import re
import shutil
import site
import subprocess
import sys

import dc_common as dc

DEVICE = "cuda"             # the backend under test (the CPU runs the reference job)
TOPK_SIZES = [2.5e7, 1e8]
TOPK_CFS = [10, 100, 1000]
TRAIN_STEPS = 300           # x batch 64 = 19 200 samples: one pass over the packed 20 000
TRAIN_EVERY = 10            # steps per recorded loss (each point: the mean over 10 batches)
# GPU vs CPU loss, same data, same order, same initial bits: only the summation order of float
# sums differs, so the first windows agree to rounding. SGD then amplifies those roundings: on the
# MLP the curves separate after about 130 steps (device check of 2026-11-27, H100: equal to 1e-4
# up to step 120, 5.5 % apart in one later window, test accuracy 78.1 against 76.3 %), and the
# same job on the CPU with 2 BLAS threads instead of 1 moves its step-300 accuracy by 0.7 points
# (Debian machine). So the exact check covers the first third of the job, and the end is
# compared by the mean loss of the last third and a looser accuracy bound; a CPU run with
# REF_THREADS threads is the rounding reference the report shows beside the GPU's difference.
TOL_FIRST = 1e-3            # |gpu - cpu| of each window in the first third, rel. to max(1, cpu)
TOL_TAIL = 0.03             # mean loss of the last third of the windows, relative
TOL_ACC = 0.03              # final test accuracy, absolute (3 points)
REF_THREADS = 2             # the CPU rounding reference: the same job with this many threads
TEST_CAP_S = 150.0          # at most this per test, so that one hang leaves time for the rest


def ver_tuple(text):
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def find_device_lib(soname):
    """The folder of this machine's `soname` (cuBLAS): the loader's cache, the CUDA toolkit,
    then PyTorch's NVIDIA wheels. None when there is none."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if os.path.exists(ldconfig):
        out = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             universal_newlines=True, check=False).stdout
        for line in out.splitlines():
            m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
            if m and m.group(1) == soname and "x86-64" in m.group(2):
                return os.path.dirname(m.group(3))
    cands = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands += [os.path.join(os.environ[var], d) for d in ("lib64", "lib",
                                                                 "targets/x86_64-linux/lib")]
    cands += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    cands += sorted(glob.glob("/usr/local/cuda-*/lib64"), reverse=True)
    cands += sorted(glob.glob("/usr/local/cuda-*/targets/x86_64-linux/lib"), reverse=True)
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "..", "lib64"))
    for d in cands:
        if os.path.exists(os.path.join(d, soname)):
            return os.path.realpath(d)
    sps = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    for sp in dict.fromkeys(p for p in sps if p and os.path.isdir(p)):
        hits = glob.glob(os.path.join(sp, "nvidia", "**", soname), recursive=True)
        hits += glob.glob(os.path.join(sp, "torch", "lib", soname))
        if hits:
            return os.path.dirname(os.path.realpath(sorted(hits)[0]))
    return None


# ---- plugins ----
def probe(chk, mode):
    """Both plugins load and run a step: (ok, why, loaded paths)."""
    env = chk.gv_env(["GV_LOG_LEVEL=info"])
    bin_ = chk.pack_path("bin")
    cmds = [("nn", [bin_ + "/gravac-worker", "--standalone", "--device", "cuda", "--dataset",
                    "synthetic", "--synthetic-n", "256", "--steps", "2", "--quiet"]),
            ("compress", [bin_ + "/gravac-bench", "compress", "--device", "cuda", "--sizes",
                          "1e5", "--cfs", "10", "--compressors", "topk", "--reps", "1",
                          "--no-multilevel"])]
    why, loaded = [], {}
    for key, argv in cmds:
        rc, text, _, to = chk.run(f"plugins-{mode}-{key}", argv, 60, env=env)
        m = re.search(r"loaded the CUDA plugin (\S+)", text)
        loaded[key] = m.group(1) if m else None
        if rc != 0:
            errs = [ln for ln in text.splitlines()
                    if re.search(r" [EW] |error|cannot|insufficient|unavailable|no CUDA", ln)]
            why.append(f"{key}: exit {rc}{' (timed out)' if to else ''}: "
                       + (" | ".join(errs[-3:]) or dc.tail(text, 2)))
    return not why, "; ".join(why), loaded


def rebuild(chk):
    """Builds the plugins from the packed sources with this machine's nvcc: (ok, why)."""
    nvcc, cmake = chk.info.get("nvcc_path"), shutil.which("cmake")
    if not nvcc or not cmake:
        return False, "cannot rebuild: " + ("no nvcc" if not nvcc else "no cmake")
    cc = chk.parts["gpu"]["devices"][0]["cc"]
    b = os.path.join(chk.work, "plugins-build")
    src = chk.pack_path(chk.manifest["plugin_sources"])
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(nvcc) + ":" + env.get("PATH", "")
    rc, text, _, _ = chk.run("plugins-configure", [
        cmake, "-S", os.path.join(src, "scripts/device-check/plugins"), "-B", b,
        "-DGV_SRC=" + src, "-DCMAKE_CUDA_COMPILER=" + nvcc, "-DCMAKE_CUDA_ARCHITECTURES=" + cc,
        "-DCMAKE_BUILD_TYPE=Release"], 180, env=env)
    if rc == 0:
        rc, text, _, _ = chk.run("plugins-build", [cmake, "--build", b, "-j",
                                                   str(os.cpu_count() or 4)], 400, env=env)
    if rc != 0:
        return False, f"the rebuild failed (exit {rc}): {dc.tail(text, 4)}"
    libdir = dc.read_text(os.path.join(b, "cuda-libdir.txt")).strip()
    chk.plugin_dir = os.path.join(b, "bin")
    # the machine's CUDA runtime now, not the packed one
    chk.lib_dirs = [d for d in chk.lib_dirs if not d.endswith("/lib/cuda")]
    chk.device_dirs = [libdir] + [d for d in chk.device_dirs if d != libdir]
    return True, ""


def part_plugins(chk):
    m, gpu = chk.manifest, chk.parts["gpu"]
    built = m["build"]["cuda_version"]
    need, dv = ver_tuple(built), gpu["driver_cuda"]
    have = (dv // 1000, dv % 1000 // 10)
    reasons, tries = [], []
    if have < need:
        reasons.append(f"the driver runs CUDA up to {have[0]}.{have[1]}, the packed plugins "
                       f"were built with CUDA {built}")
    missing = chk.parts["pack"].get("device_libs_missing", [])
    if missing:
        reasons.append(f"no {', '.join(missing)} on this machine")
    if not reasons:
        chk.plugin_dir = chk.pack_path("bin")
        ok, why, loaded = probe(chk, "packed")
        tries.append({"mode": "packed", "ok": ok, "why": why, "loaded": loaded})
        if ok:
            chk.record("plugins", "ok", f"plugins: the packed ones run (CUDA {built}): "
                       f"{loaded['nn']}, {loaded['compress']}", mode="packed", tries=tries,
                       env_ld_library_path=chk.gv_env()["LD_LIBRARY_PATH"])
            return True
        reasons.append(f"the packed plugins fail: {why}")
    chk.say(f"plugins: rebuilding them with {chk.info.get('nvcc_path')} "
            f"(CUDA {chk.info.get('nvcc')}): {'; '.join(reasons)}")
    ok, why = rebuild(chk)
    loaded = {}
    if ok:
        ok, why, loaded = probe(chk, "rebuilt")
    tries.append({"mode": "rebuilt", "ok": ok, "why": why, "loaded": loaded})
    if not ok:
        chk.record("plugins", "failed", f"plugins: FAILED: {why}", mode="none", tries=tries,
                   reasons=reasons)
        return False
    chk.record("plugins", "ok", f"plugins: rebuilt here with CUDA {chk.info.get('nvcc')}: "
               f"{loaded['nn']}, {loaded['compress']}", mode="rebuilt", tries=tries,
               reasons=reasons, env_ld_library_path=chk.gv_env()["LD_LIBRARY_PATH"])
    return True


# ---- tests ----
def run_tests(chk, group, extra_env=None):
    """Runs the manifest's tests of `group`; a list of result records."""
    results = []
    for t in [t for t in chk.manifest["tests"] if t["group"] == group]:
        name = t["name"]
        if chk.remaining() < 20:
            results.append({"name": name, "status": "not run", "reason": "out of time"})
            chk.say(f"  {name}: not run (out of time)")
            continue
        argv = [a.replace("@PACK@", chk.pack) for a in t["argv"]]
        cwd = os.path.join(chk.work, "run", name)
        os.makedirs(cwd, exist_ok=True)
        rc, text, secs, to = chk.run("test-" + name, argv, min(t["timeout"], TEST_CAP_S),
                                     env=chk.gv_env(t["env"] + (extra_env or [])), cwd=cwd)
        status = ("passed" if rc == 0 else "timeout" if to else
                  "skipped" if rc == t["skip_rc"] else "failed")
        notes = [ln.strip() for ln in text.splitlines()
                 if re.search(r"samples/s|SKIP|FAIL|accuracy|GB/s|Gb/s", ln)][:12]
        r = {"name": name, "status": status, "rc": rc, "seconds": round(secs, 1),
             "notes": notes, "log": f"logs/test-{name}.log"}
        if status != "passed":
            r["tail"] = dc.tail(text, 12)
        results.append(r)
        skip = next((n for n in notes if "SKIP" in n), "")
        chk.say(f"  {name}: {status.upper()} ({secs:.1f} s){': ' + skip if skip else ''}")
    return results


def part_gpu_tests(chk):
    chk.say("gpu-tests:")
    res = run_tests(chk, "gpu")
    npass = sum(r["status"] == "passed" for r in res)
    # a GPU test that skips on a GPU machine did not run its checks: a failure here
    status = "ok" if npass == len(res) else "failed"
    chk.record("gpu_tests", status, f"gpu-tests: {npass} of {len(res)} passed", tests=res)


# ---- top-k ----
def part_topk(chk):
    env = chk.gv_env()
    sizes = ",".join(f"{s:g}" for s in TOPK_SIZES)
    cfs = ",".join(str(c) for c in TOPK_CFS)
    rc, text, _, _ = chk.run("topk-gravac", [
        chk.pack_path("bin/gravac-bench"), "compress", "--device", DEVICE, "--sizes", sizes,
        "--cfs", cfs, "--compressors", "topk", "--reps", "21", "--json"], 180, env=env,
        stdout=True)
    try:
        gv = json.loads(text)
    except ValueError:
        chk.record("topk", "failed", f"topk: FAILED: gravac-bench compress --device cuda exited "
                   f"{rc} without its JSON (logs/topk-gravac.log)", rc=rc)
        return
    rc, text, _, _ = chk.run("topk-torch", [
        sys.executable, chk.pack_path(chk.manifest["torch_topk"]), "--n", sizes, "--cf", cfs,
        "--reps", "21", "--copy-bw", "--json"], 240, env=dict(os.environ), stdout=True)
    torch_doc = None
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            torch_doc = json.loads(line)
            break
    rows = topk_compare(gv["rows"], torch_doc)
    for r in rows:
        chk.say(topk_line(r))
    fields = {"gravac": gv, "torch": torch_doc, "compare": rows}
    if torch_doc is None:
        chk.record("topk", "failed", f"topk: FAILED: torch_topk.py exited {rc} "
                   "(logs/topk-torch.log): no torch.topk baseline", **fields)
        return
    c = torch_doc["copy"]
    chk.record("topk", "ok", f"topk: device copy bandwidth {c['gbs']:.0f} GB/s (read + write, "
               f"{c['bytes'] >> 20} MiB, torch); {torch_doc['device']}", **fields)


def topk_compare(gv_rows, torch_doc):
    """Per (n, cf): gravac's time against torch.topk and against one read of the input at the
    measured copy bandwidth."""
    copy_gbs = torch_doc["copy"]["gbs"] if torch_doc else None
    memcpy = {r["n"]: r for r in gv_rows if r["what"] == "memcpy"}
    if copy_gbs is None and memcpy:        # no torch: the bench's own copy of the largest n
        big = memcpy[max(memcpy)]
        copy_gbs = 2 * 4 * big["n"] / (big["time_ms"] * 1e-3) / 1e9
    tr = {(r["n"], float(r["cf"])): r for r in (torch_doc or {}).get("rows", [])}
    out = []
    for r in gv_rows:
        if r["what"] != "topk":
            continue
        n, cf, ms = int(r["n"]), float(r["cf"]), r["time_ms"]
        row = {"n": n, "cf": cf, "k": r["k"], "gravac_ms": ms,
               "gravac_input_gbs": r["input_gbs"]}
        if copy_gbs:
            bound = 4 * n / (copy_gbs * 1e9) * 1e3
            row.update(bound_ms=bound, copy_gbs=copy_gbs, x_bound=ms / bound)
        if n in memcpy:
            row["bench_copy_ms"] = memcpy[n]["time_ms"]
        t = tr.get((n, cf))
        if t:
            row.update(torch_select_ms=t["select_ms"], torch_compressor_ms=t["compressor_ms"],
                       speedup_vs_select=t["select_ms"] / ms,
                       speedup_vs_compressor=t["compressor_ms"] / ms)
        out.append(row)
    return out


def topk_line(r):
    s = f"  top-k n {r['n']:.3g} CF {r['cf']:g}: gravac {r['gravac_ms']:.3f} ms"
    if "torch_select_ms" in r:
        s += (f"; torch.topk {r['torch_select_ms']:.3f} ms, abs+topk+gather "
              f"{r['torch_compressor_ms']:.3f} ms: gravac {r['speedup_vs_compressor']:.2f}x "
              f"faster ({r['speedup_vs_select']:.2f}x vs the selection alone)")
    if "bound_ms" in r:
        s += f"; bound {r['bound_ms']:.4f} ms: {r['x_bound']:.1f}x the bound"
    return s


# ---- training ----
def train_run(chk, model, device, threads=1):
    tag = device if threads == 1 else f"{device}{threads}"
    metrics = os.path.join(chk.logs, f"train-{model}-{tag}.jsonl")
    argv = [chk.pack_path("bin/gravac-worker"), "--standalone", "--model", model,
            "--dataset", "fashion-mnist", "--data-dir", chk.pack_path("data"),
            "--steps", str(TRAIN_STEPS), "--batch", "64", "--lr", "0.02", "--seed", "1",
            "--progress-every", str(TRAIN_EVERY), "--eval-every", str(TRAIN_STEPS),
            "--threads", str(threads), "--device", device, "--metrics-file", metrics]
    rc, text, secs, _ = chk.run(f"train-{model}-{tag}", argv, 150, env=chk.gv_env())
    res = {"device": device, "rc": rc, "seconds": round(secs, 1), "steps": [], "eval": None}
    m = re.search(r"([\d.]+) samples/s training", text)
    res["samples_per_s"] = float(m.group(1)) if m else None
    for line in dc.read_text(metrics).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("type") == "step":
            res["steps"].append({"step": rec["step"], "loss": rec["loss"],
                                 "samples_per_s": rec.get("samples_per_s")})
        elif rec.get("type") == "eval":
            res["eval"] = {"loss": rec["loss"], "accuracy": rec["accuracy"]}
    if rc != 0:
        res["tail"] = dc.tail(text, 8)
    return res


def compare_curves(cpu, gpu, ref=None):
    """The GPU run against the CPU run of the same job: checks and the numbers behind them.
    `ref` (optional) is the CPU job with other BLAS threads: its distance from `cpu` is the
    spread that rounding alone makes, recorded beside the GPU's."""
    a = {s["step"]: s["loss"] for s in cpu["steps"]}
    b = {s["step"]: s["loss"] for s in gpu["steps"]}
    steps = sorted(set(a) & set(b))
    c = {"points": len(steps), "same_points": set(a) == set(b) and len(steps) > 0}
    if len(steps) < 3:
        c["ok"] = False
        return c
    diffs = [abs(b[s] - a[s]) for s in steps]
    third = len(steps) // 3
    head = [abs(b[s] - a[s]) / max(1.0, a[s]) for s in steps[:third]]
    tail_a = sum(a[s] for s in steps[-third:]) / third
    tail_b = sum(b[s] for s in steps[-third:]) / third
    agree = 0       # the last step up to which every window agrees within TOL_FIRST
    for s in steps:
        if abs(b[s] - a[s]) / max(1.0, a[s]) > TOL_FIRST:
            break
        agree = s
    c.update(first_abs_diff=diffs[0], max_abs_diff=max(diffs),
             max_rel_diff=max(d / max(0.1, a[s]) for d, s in zip(diffs, steps)),
             head_steps=steps[third - 1], head_max_rel_diff=max(head), agree_to_step=agree,
             cpu_first_loss=a[steps[0]], cpu_last_loss=a[steps[-1]],
             gpu_last_loss=b[steps[-1]], cpu_tail_loss=tail_a, gpu_tail_loss=tail_b,
             tail_rel_diff=abs(tail_b - tail_a) / max(0.1, tail_a),
             first_ok=head[0] <= TOL_FIRST, head_ok=max(head) <= TOL_FIRST)
    c["tail_ok"] = c["tail_rel_diff"] <= TOL_TAIL
    ok = c["same_points"] and c["head_ok"] and c["tail_ok"]
    if cpu["eval"] and gpu["eval"]:
        c["acc_cpu"], c["acc_gpu"] = cpu["eval"]["accuracy"], gpu["eval"]["accuracy"]
        c["acc_ok"] = abs(c["acc_gpu"] - c["acc_cpu"]) <= TOL_ACC
        ok = ok and c["acc_ok"]
    else:
        ok = False
    if ref and ref.get("eval") and cpu["eval"]:
        r = {s["step"]: s["loss"] for s in ref["steps"]}
        rs = [s for s in steps if s in r]
        c["ref_acc"] = ref["eval"]["accuracy"]
        c["ref_acc_diff"] = abs(c["ref_acc"] - cpu["eval"]["accuracy"])
        if rs:
            c["ref_max_abs_diff"] = max(abs(r[s] - a[s]) for s in rs)
    if cpu.get("samples_per_s") and gpu.get("samples_per_s"):
        c["speedup"] = gpu["samples_per_s"] / cpu["samples_per_s"]
    c["ok"] = ok
    return c


def part_training(chk):
    runs, failed = {}, False
    for model in ("mlp", "cnn"):
        if chk.remaining() < 60:
            runs[model] = {"status": "not run", "reason": "out of time"}
            failed = True
            chk.say(f"  train {model}: not run (out of time)")
            continue
        cpu = train_run(chk, model, "cpu")
        gpu = train_run(chk, model, DEVICE)
        ref = train_run(chk, model, "cpu", REF_THREADS)
        ref = ref if ref["rc"] == 0 else None
        cmp_ = (compare_curves(cpu, gpu, ref) if cpu["rc"] == 0 and gpu["rc"] == 0
                else {"ok": False})
        runs[model] = {"cpu": cpu, "cuda": gpu, f"cpu{REF_THREADS}": ref, "compare": cmp_}
        failed |= not cmp_["ok"]
        chk.say(train_line(model, cpu, gpu, cmp_))
    bench = []
    if chk.remaining() > 40:
        rc, text, _, _ = chk.run("bench-nn", [chk.pack_path("bin/gravac-bench"), "nn",
                                              "--models", "mlp,cnn", "--device", "both",
                                              "--seconds", "1", "--json"], 90,
                                 env=chk.gv_env(), stdout=True)
        for line in text.splitlines():
            if line.startswith("{"):
                bench.append(json.loads(line))
        for r in bench:
            if r.get("device") == DEVICE:
                chk.say(f"  gravac-bench nn {r['model']}: cuda {r['train_samples_per_s']:.0f} "
                        f"train samples/s, {r['train_vs_cpu']:.1f}x the CPU (1 thread, "
                        f"batch {r['batch']})")
    chk.record("training", "failed" if failed else "ok",
               f"training: GPU against CPU, {TRAIN_STEPS} steps of 64 per model: "
               + ("FAILED" if failed else "curves agree"),
               steps=TRAIN_STEPS, every=TRAIN_EVERY,
               tolerances={"head": TOL_FIRST, "tail": TOL_TAIL, "accuracy": TOL_ACC},
               ref_threads=REF_THREADS,
               runs=runs, bench_nn=bench)


def train_line(model, cpu, gpu, c):
    if cpu["rc"] != 0 or gpu["rc"] != 0:
        bad = cpu if cpu["rc"] != 0 else gpu
        return (f"  train {model}: FAILED: the {bad['device']} run exited {bad['rc']}: "
                f"{bad.get('tail', '')}")
    if not c.get("points"):
        return f"  train {model}: FAILED: no loss records to compare"
    s = (f"  train {model}: loss {c['cpu_first_loss']:.4f} -> cpu {c['cpu_last_loss']:.4f} / "
         f"gpu {c['gpu_last_loss']:.4f}; equal within {TOL_FIRST:g} to step "
         f"{c['agree_to_step']} (first {c['first_abs_diff']:.1e}), last-third mean "
         f"{c['tail_rel_diff'] * 100:.1f} % apart, max |diff| {c['max_abs_diff']:.2e}")
    if "acc_cpu" in c:
        s += f"; test acc cpu {c['acc_cpu']:.4f} gpu {c['acc_gpu']:.4f}"
    if "ref_acc" in c:
        s += (f" (cpu with {REF_THREADS} threads {c['ref_acc']:.4f}, max |diff| "
              f"{c.get('ref_max_abs_diff', float('nan')):.2e})")
    if "speedup" in c:
        s += (f"; {gpu['samples_per_s']:.0f} vs {cpu['samples_per_s']:.0f} samples/s "
              f"({c['speedup']:.1f}x)")
    return s + ("" if c["ok"] else "  FAILED")


def run_all(chk):
    if not chk.guard("plugins", part_plugins, chk):
        for p in ("gpu_tests", "topk", "training"):
            chk.skip(p, "the CUDA plugins do not run here (see plugins)")
        return
    for name, fn, need in (("gpu_tests", part_gpu_tests, 60), ("topk", part_topk, 45),
                           ("training", part_training, 90)):
        if chk.remaining() < need:
            chk.record(name, "failed", f"{name}: FAILED: out of time ({chk.remaining():.0f} s "
                       "left)", reason="out of time")
            continue
        chk.guard(name, fn, chk)
