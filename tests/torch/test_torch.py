#!/usr/bin/python3
"""The PyTorch binding in gravac jobs: gravac-launch starts 1 server and 2 workers running
torch_job.py on loopback, and the case checks what came out.

    test_torch.py CASE BUILD_DIR

  replicas   static CF 4 and GraVAC, SGD, Adam, AdamW: both workers' parameters bitwise equal
  dense      --method dense equals one process on the global batch (SGD and Adam) within
             float tolerance after 20 steps, the replicas bitwise equal
  loss       each step's training loss reaches gravac's statistics: captured from backward()
             (the mean of the calls of a step with gradient accumulation), set_loss()'s value
             when given, none with capture_loss=False
  evaltime   worker 0 evaluates between two steps and reports it: the controller's compute
             time leaves the evaluation out
  lr         the wrapped optimizer's learning rate, dropped by a StepLR scheduler, is the one
             the servers' controller observes (server 0's --obs-trace)
  mismatch   worker 1's model is wider: refused naming the first differing tensor; the job
             stops
  error      worker 1's script raises: the job stops, its traceback in the output, every
             process naming the error
  diverge    worker 1 changes a parameter behind the optimizer: the servers stop the job
  mpirun     an MPMD mpirun job: gravac-server and two Python workers, ranks from Open MPI
  examples   each example runs a few steps (the MLP, ResNet-18, the LSTM)

Exit 77 (SKIP) where torch is not installed or the build is sanitized (an ASan libgravac cannot
be loaded into an uninstrumented Python; test_libgravac covers the library there).
"""

import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL: " + what, flush=True)
    else:
        print("ok: " + what, flush=True)


def launch(build, args, script_args, timeout=120):
    """Runs gravac-launch; returns (exit status, output, seconds)."""
    cmd = [os.path.join(build, "bin", "gravac-launch"), "--servers", "1", "--workers", "2",
           "--connect-timeout", "60s"] + args + ["--", "/usr/bin/python3"] + script_args
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("GRAVAC_LIBRARY", None)
    t0 = time.time()
    # on a timeout the launcher is killed outright; its servers and workers follow it (the
    # kernel sends them SIGTERM when it dies, test_e2e_launch case 7)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                         start_new_session=True)
    try:
        data, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        data, _ = p.communicate()
        out = data.decode("utf-8", "replace")
        return -9, out + "\n(timed out after %d s: the whole job was killed)" % timeout, \
            time.time() - t0
    out = data.decode("utf-8", "replace")
    return p.returncode, out, time.time() - t0


def job(build, out, mode, optimizer, method_args, steps=20, script_args=()):
    return launch(build, method_args,
                  [os.path.join(HERE, "torch_job.py"), "--mode", mode, "--optimizer", optimizer,
                   "--steps", str(steps), "--out", out] + list(script_args))


def params(out, name):
    import numpy as np
    with open(os.path.join(out, name + ".bin"), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.float32)


def show(out_text, n=40):
    print("\n".join(out_text.splitlines()[-n:]))


def case_replicas(build, tmp):
    runs = [("sgd", ["--method", "static", "--cf", "4"]),
            ("adam", ["--method", "gravac-exp", "--window", "4", "--theta-min", "2",
                      "--epsilon", "0.3"]),
            ("adamw", ["--method", "static", "--cf", "10", "--fp16"])]
    for opt, margs in runs:
        rc, text, secs = job(build, tmp, "train", opt, margs)
        what = "%s, %s" % (opt, " ".join(margs))
        check(rc == 0, "%s: the job succeeds (%.1f s)" % (what, secs))
        if rc != 0:
            show(text)
            continue
        a, b = params(tmp, "params-0"), params(tmp, "params-1")
        check(a.tobytes() == b.tobytes(), "%s: the replicas are bitwise equal" % what)
        check("0 mismatches" in text, "%s: every checksum check passed" % what)
        check("torch_job: worker 0 done" in text, "%s: worker 0 finished" % what)


def case_dense(build, tmp):
    import numpy as np
    for opt in ("sgd", "adam"):
        rc, text, secs = job(build, tmp, "train", opt, ["--method", "dense"])
        check(rc == 0, "dense %s: the job succeeds (%.1f s)" % (opt, secs))
        if rc != 0:
            show(text)
            continue
        r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_job.py"), "--mode",
                            "reference", "--optimizer", opt, "--steps", "20", "--out", tmp])
        check(r.returncode == 0, "dense %s: the single-process reference ran" % opt)
        a, b, ref = params(tmp, "params-0"), params(tmp, "params-1"), params(tmp, "reference")
        check(a.tobytes() == b.tobytes(), "dense %s: the replicas are bitwise equal" % opt)
        err = float(np.max(np.abs(a - ref)))
        scale = float(np.max(np.abs(ref)))
        moved = float(np.max(np.abs(ref - params0(tmp))))
        check(err <= 1e-5 * max(1.0, scale),
              "dense %s: equals one process on the global batch: max |diff| %.3g (parameters "
              "up to %.3g, moved up to %.3g in 20 steps)" % (opt, err, scale, moved))
        check(moved > 100 * max(err, 1e-9), "dense %s: the comparison is not trivial" % opt)


def case_loss(build, tmp):
    """The loss in each worker's metrics file is the value its step handed to the servers
    (libgravac writes the loss it was given; null when it was not given)."""
    import json
    runs = [("capture", [], 1.0), ("capture", ["--accumulate"], 1.0), ("set", [], 2.0),
            ("none", [], None)]
    for mode, extra, factor in runs:
        what = "loss %s%s" % (mode, " with gradient accumulation" if extra else "")
        metrics = os.path.join(tmp, "m-%s%d-%%r.jsonl" % (mode, len(extra)))
        rc, text, secs = job(build, tmp, "train", "sgd",
                             ["--method", "auto", "--metrics-file", metrics], steps=10,
                             script_args=["--loss", mode] + extra)
        check(rc == 0, "%s: the job succeeds (%.1f s)" % (what, secs))
        if rc != 0:
            show(text)
            continue
        told = text.count("gravac_step: no training loss given (NaN)")
        check(told == (2 if factor is None else 0),
              "%s: %s" % (what, "each worker warned once that AUTO gets no loss"
                          if factor is None else "no warning about a missing loss"))
        for rank in (0, 1):
            with open(os.path.join(tmp, "losses-%d.txt" % rank)) as f:
                mine = [float(v) for v in f.read().split()]
            with open(metrics.replace("%r", str(rank))) as f:
                rows = [json.loads(line) for line in f]
            got = [r["loss"] for r in rows if r.get("type") == "iter"]
            want = [None if factor is None else factor * v for v in mine]
            ok = len(got) == len(want) == 10 and all(
                (g is None and w is None) or (g is not None and w is not None
                                              and abs(g - w) <= 1e-12 * max(1.0, abs(w)))
                for g, w in zip(got, want))
            check(ok, "%s: worker %d's steps carried %s" % (
                what, rank, "no loss" if factor is None else
                "its training loss%s" % (" x 2" if factor == 2.0 else "")))
            if not ok:
                print("  metrics: %s\n  script:  %s" % (got, want))


def case_lr(build, tmp):
    trace = os.path.join(tmp, "obs.csv")
    rc, text, secs = job(build, tmp, "train", "sgd", ["--method", "auto", "--obs-trace", trace],
                         steps=12, script_args=["--lr-drop-at", "5"])
    check(rc == 0, "lr: the job succeeds (%.1f s)" % secs)
    if rc != 0:
        show(text)
        return
    with open(trace) as f:
        lines = [line for line in f if not line.startswith("#")]
    head = lines[0].strip().split(",")
    rows = [dict(zip(head, line.strip().split(","))) for line in lines[1:]]
    got = [(int(r["iter"]), float(r["lr"])) for r in rows]
    # torch_job's SGD starts at 0.1; StepLR(5, 0.1): 0.01 from iteration 5, 0.001 from 10
    want = [(i, 0.1 * 0.1 ** (i // 5)) for i in range(12)]
    ok = len(got) == 12 and all(g[0] == w[0] and abs(g[1] - w[1]) <= 1e-12 for g, w in
                                zip(got, want))
    check(ok, "lr: the controller observed the scheduler's lr at every iteration "
          "(0.1, 0.01 from iteration 5, 0.001 from 10)")
    if not ok:
        print("  observed: %s" % got)


def case_evaltime(build, tmp):
    """Worker 0 evaluates (a 0.5 s pause) after step 4 and calls gravac.torch.report(): the
    iteration time the controller sees (server 0's --obs-trace: the slowest worker's compute
    and compression, and the rest of the round's period) leaves the evaluation out, as the
    metrics' train_s does."""
    import json
    trace, metrics = os.path.join(tmp, "obs.csv"), os.path.join(tmp, "m-%r.jsonl")
    rc, text, secs = job(build, tmp, "train", "sgd", ["--method", "auto", "--obs-trace", trace,
                                                      "--metrics-file", metrics],
                         steps=10, script_args=["--eval-at", "4"])
    check(rc == 0, "evaluation time: the job succeeds (%.1f s)" % secs)
    if rc != 0:
        show(text)
        return
    with open(metrics.replace("%r", "0")) as f:
        evals = [r for r in (json.loads(line) for line in f) if r.get("type") == "eval"]
    gap = evals[0]["time_s"] - evals[0]["train_s"] if evals else 0.0
    check(len(evals) == 1 and gap >= 0.45,
          "evaluation time: worker 0 paused %.2f s to evaluate, outside its train_s" % gap)
    with open(trace) as f:
        lines = [line for line in f if not line.startswith("#")]
    head = lines[0].strip().split(",")
    rows = [dict(zip(head, line.strip().split(","))) for line in lines[1:]]
    t = [float(r["t_compute"]) for r in rows]
    check(len(t) == 10 and max(t) < 0.25,
          "evaluation time: no iteration's compute time carries it (the longest %.3f s)"
          % max(t or [0.0]))
    t = [float(r["t_compute"]) + float(r["t_compress"]) + float(r["t_comm"]) for r in rows]
    check(len(t) == 10 and max(t) < 0.25,
          "evaluation time: nor its time in all (compute, compression and the rest of the "
          "round's period: worker 1 waited for worker 0; the longest %.3f s)" % max(t or [0.0]))


def params0(tmp):
    """Worker 0's initial parameters (what the reference starts from)."""
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    import torch_job
    torch.manual_seed(100)
    m = torch_job.Net()
    return np.concatenate([p.detach().reshape(-1).numpy() for p in m.parameters()])


def case_mismatch(build, tmp):
    rc, text, secs = job(build, tmp, "mismatch", "sgd", ["--method", "dense"])
    check(rc != 0, "mismatch: the job fails (status %d, %.1f s)" % (rc, secs))
    check("model layout mismatch: tensor 0 is 'fc1.weight' [33, 20] on worker 1" in text
          and "'fc1.weight' [32, 20] on server 0 (from worker 0" in text,
          "mismatch: worker 1 is refused, the first differing tensor named with both shapes")
    check(secs < 60, "mismatch: every process stopped within a minute (%.1f s)" % secs)
    if FAILS:
        show(text)


def case_error(build, tmp):
    rc, text, secs = job(build, tmp, "error", "sgd", ["--method", "static", "--cf", "4"])
    check(rc == 1, "error: the job fails with status 1 (got %d, %.1f s)" % (rc, secs))
    check("[worker1] Traceback (most recent call last):" in text
          and "[worker1] ZeroDivisionError: float division by zero" in text
          and "in divide" in text, "error: worker 1's traceback is in the output")
    check("the training script raised ZeroDivisionError: float division by zero "
          "(torch_job.py line" in text, "error: the servers and worker 0 name the error")
    check("gravac-launch: FAILED: worker1 (exit status 1)" in text,
          "error: gravac-launch names worker 1")
    check(secs < 30, "error: every process stopped soon (%.1f s)" % secs)
    if FAILS:
        show(text)


def case_diverge(build, tmp):
    rc, text, secs = job(build, tmp, "diverge", "sgd", ["--method", "static", "--cf", "4"])
    check(rc != 0, "diverge: the job fails (status %d, %.1f s)" % (rc, secs))
    check("replicas diverged before iteration 3" in text and "on worker 1" in text,
          "diverge: the servers name the iteration and worker 1")
    if FAILS:
        show(text)


def case_mpirun(build, tmp):
    """MPMD mpirun: the server takes global rank 0, the Python workers 1 and 2 (libgravac reads
    OMPI_COMM_WORLD_RANK and the world size as gravac-worker does)."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIP: no mpirun (Debian: openmpi-bin)")
        sys.exit(77)
    rdv = os.path.join(tmp, "rdv")
    os.makedirs(rdv)
    env = dict(os.environ, GV_NUM_SERVERS="1", GV_RENDEZVOUS_DIR=rdv, GV_INSECURE="true",
               GV_MODEL="external", GV_OPTIMIZER="caller", GV_METHOD="static", GV_CF="4",
               PYTHONPATH=os.path.join(build, "python"), OMP_NUM_THREADS="1")
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "1",
           os.path.join(build, "bin", "gravac-server"), ":", "-np", "2", "/usr/bin/python3",
           os.path.join(HERE, "torch_job.py"), "--out", tmp, "--steps", "10"]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=120)
    text = p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0, "mpirun: the job succeeds (%.1f s)" % (time.time() - t0))
    check("rank from OMPI_COMM_WORLD_RANK=0" in text and "worker 1 of 2" in text,
          "mpirun: the server took global rank 0, the workers the others")
    if p.returncode == 0:
        a, b = params(tmp, "params-0"), params(tmp, "params-1")
        check(a.tobytes() == b.tobytes(), "mpirun: the replicas are bitwise equal")
    if FAILS:
        show(text)


def case_examples(build, tmp):
    ex = os.path.join(SRC, "examples")
    runs = [["fmnist_mlp.py", "--steps", "4"],
            ["fmnist_resnet18.py", "--steps", "2", "--batch", "8"],
            ["fortunes_lstm.py", "--steps", "4", "--batch", "8"]]
    for r in runs:
        rc, text, secs = launch(build, ["--method", "static", "--cf", "10"],
                                [os.path.join(ex, r[0])] + r[1:], timeout=300)
        check(rc == 0 and "summary:" in text and "final test accuracy" in text,
              "example %s runs (%.1f s)" % (r[0], secs))
        if rc != 0:
            show(text)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    case, build = sys.argv[1], sys.argv[2]
    if os.environ.get("GV_TEST_SANITIZED") == "1":
        print("SKIP: a sanitized libgravac cannot be loaded into an uninstrumented Python "
              "(test_libgravac runs the library under the sanitizers)")
        return 77
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: PyTorch is not installed for /usr/bin/python3 (Debian: python3-torch)")
        return 77
    tmp = tempfile.mkdtemp(prefix="gv_test_torch_")
    try:
        globals()["case_" + case](build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %s" % (case, "FAILED: " + "; ".join(FAILS) if FAILS else "OK"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
