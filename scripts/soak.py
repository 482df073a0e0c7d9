#!/usr/bin/env python3
"""soak.py: the soak benchmark of issue 18 (not part of the test suite).

Runs the same job twice in one invocation, each for --duration seconds (default 600): first
clean, then under mixed abuse of server 0 (connection churn, an idle flood, garbage frames,
metrics scrapes), and reports, every --every seconds and in a summary, the iterations per
second, the servers' RSS and CPU, and how the abused run compares with the clean one.

    scripts/soak.py [--bin build/bin] [--duration 600] [--every 30] [--json out.json]

The job: 2 gravac-server and 2 gravac-worker processes on loopback (an MLP on synthetic
data, static CF 10), ended with SIGTERM once the time is up (exit 3 everywhere is expected).
The abuse, on server 0's port and its metrics endpoint, for the whole abused run:
  churn    2 threads connecting and closing (a reset) as fast as they are let, each at most
           1000 a second
  idle     100 connections that send nothing, reopened when the server closes them (its
           handshake timeout, 2 s here)
  garbage  every 50 ms a connection that sends 256 random bytes, then closes
  scrapes  8 threads fetching /metrics in a loop, 50 ms apart
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

CLK = os.sysconf("SC_CLK_TCK")


def proc_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def proc_cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / CLK
    except (OSError, IndexError, ValueError):
        return -1.0


def last_iter(path):
    """The last iteration worker 0 recorded in its metrics file."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            tail = f.read().decode(errors="replace")
    except OSError:
        return -1
    it = -1
    for line in tail.splitlines():
        if line.startswith('{"type":"iter"'):
            try:
                it = json.loads(line)["iter"]
            except (ValueError, KeyError):
                pass
    return it


def wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    return None


class Job:
    def __init__(self, bindir, root, tag):
        self.dir = os.path.join(root, tag)
        os.makedirs(os.path.join(self.dir, "rdv"))
        common = ["--dataset", "synthetic", "--synthetic-n", "4096", "--batch", "32",
                  "--widths", "64", "--steps", "1000000000", "--method", "static", "--cf", "10",
                  "--num-servers", "2", "--num-workers", "2",
                  "--rendezvous-dir", os.path.join(self.dir, "rdv"), "--insecure",
                  "--handshake-timeout", "2s", "--connect-timeout", "30s"]
        self.procs = []
        self.logs = []
        for s in range(2):
            args = [os.path.join(bindir, "gravac-server")] + common + [
                "--rank", str(s), "--bind", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]
            self._spawn(args, f"server{s}")
        self.mfile = os.path.join(self.dir, "worker0.jsonl")
        for w in range(2):
            args = [os.path.join(bindir, "gravac-worker")] + common + [
                "--rank", str(w), "--quiet", "--metrics-file",
                os.path.join(self.dir, "worker%r.jsonl")]
            self._spawn(args, f"worker{w}")
        self.port = wait_for(lambda: self._addr_port(0), 30)
        self.mport = wait_for(self._metrics_port, 30)
        if not self.port or not self.mport:
            self.stop()
            sys.exit("soak: the job did not start (see %s)" % self.dir)

    def _spawn(self, args, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT))

    def _addr_port(self, s):
        try:
            with open(os.path.join(self.dir, "rdv", f"server-{s}.addr")) as f:
                return int(f.read().strip().rsplit(":", 1)[1])
        except (OSError, ValueError, IndexError):
            return None

    def _metrics_port(self):
        try:
            with open(os.path.join(self.dir, "server0.log")) as f:
                for line in f:
                    if "metrics at http://127.0.0.1:" in line:
                        return int(line.split("http://127.0.0.1:")[1].split("/")[0])
        except OSError:
            pass
        return None

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()
        return [p.returncode for p in self.procs]


class Abuse:
    def __init__(self, port, mport):
        self.port, self.mport = port, mport
        self.stop = threading.Event()
        self.count = {"churn": 0, "idle": 0, "garbage": 0, "scrapes": 0, "scrape_errors": 0}
        self.lock = threading.Lock()
        self.threads = []
        for fn, n in ((self.churn, 2), (self.idle, 1), (self.garbage, 1), (self.scrape, 8)):
            for _ in range(n):
                t = threading.Thread(target=fn, daemon=True)
                t.start()
                self.threads.append(t)

    def add(self, key, n=1):
        with self.lock:
            self.count[key] += n

    def connect(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(("127.0.0.1", self.port))
        return s

    def churn(self):
        while not self.stop.is_set():
            t0 = time.time()
            for _ in range(100):
                try:
                    s = self.connect()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                    s.close()
                    self.add("churn")
                except OSError:
                    pass
            time.sleep(max(0.0, 0.1 - (time.time() - t0)))

    def idle(self):
        conns = []
        while not self.stop.is_set():
            alive = []
            for s in conns:
                try:
                    if s.recv(1, socket.MSG_DONTWAIT) == b"":
                        s.close()
                        continue
                except BlockingIOError:
                    pass
                except OSError:
                    s.close()
                    continue
                alive.append(s)
            conns = alive
            while len(conns) < 100 and not self.stop.is_set():
                try:
                    conns.append(self.connect())
                    self.add("idle")
                except OSError:
                    break
            time.sleep(0.2)
        for s in conns:
            s.close()

    def garbage(self):
        rnd = random.Random(18)
        while not self.stop.is_set():
            try:
                s = self.connect()
                s.sendall(bytes(rnd.getrandbits(8) for _ in range(256)))
                s.close()
                self.add("garbage")
            except OSError:
                pass
            time.sleep(0.05)

    def scrape(self):
        url = f"http://127.0.0.1:{self.mport}/metrics"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        while not self.stop.is_set():
            try:
                with opener.open(url, timeout=5) as r:
                    r.read()
                self.add("scrapes")
            except OSError:
                self.add("scrape_errors")
            time.sleep(0.05)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        return dict(self.count)


def run(bindir, root, tag, duration, every, abused):
    job = Job(bindir, root, tag)
    wait_for(lambda: last_iter(job.mfile) >= 100, 60)
    servers = job.procs[:2]
    abuse = Abuse(job.port, job.mport) if abused else None
    rows = []
    t0 = time.time()
    prev = (t0, last_iter(job.mfile), [proc_cpu_s(p.pid) for p in servers])
    print(f"{'t[s]':>6} {'it/s':>9} " + " ".join(
        f"{'s%d RSS[MiB]' % s:>12} {'s%d CPU[%%]' % s:>10}" for s in range(2)), flush=True)
    while time.time() - t0 < duration:
        time.sleep(min(every, max(0.0, duration - (time.time() - t0))))
        now, it = time.time(), last_iter(job.mfile)
        cpu = [proc_cpu_s(p.pid) for p in servers]
        rss = [proc_rss_kib(p.pid) / 1024.0 for p in servers]
        dt = now - prev[0]
        row = {"t": round(now - t0, 1), "its": (it - prev[1]) / dt if dt > 0 else 0.0,
               "rss_mib": [round(x, 1) for x in rss],
               "cpu_pct": [round(100.0 * (c - c0) / dt, 1) for c, c0 in zip(cpu, prev[2])]}
        rows.append(row)
        print(f"{row['t']:6.0f} {row['its']:9.0f} " + " ".join(
            f"{row['rss_mib'][s]:12.1f} {row['cpu_pct'][s]:10.1f}" for s in range(2)),
            flush=True)
        prev = (now, it, cpu)
    counts = abuse.end() if abuse else {}
    codes = job.stop()
    return {"rows": rows, "abuse": counts, "exit": codes}


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


def summary(name, r):
    its = [x["its"] for x in r["rows"]]
    rss = [max(x["rss_mib"]) for x in r["rows"]]
    cpu0 = [x["cpu_pct"][0] for x in r["rows"]]
    return {"run": name, "median_its": median(its), "min_its": min(its) if its else 0,
            "rss_first_mib": rss[0] if rss else 0, "rss_last_mib": rss[-1] if rss else 0,
            "rss_max_mib": max(rss) if rss else 0, "server0_cpu_mean_pct":
            sum(cpu0) / len(cpu0) if cpu0 else 0, "abuse": r["abuse"], "exit": r["exit"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin"))
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--every", type=float, default=30)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="gravac-soak-")
    print(f"soak: {a.duration:.0f} s clean, then {a.duration:.0f} s under abuse; "
          f"load average {os.getloadavg()[0]:.1f}; run directory {root}", flush=True)
    out = {}
    for name, abused in (("clean", False), ("abused", True)):
        print(f"== {name}", flush=True)
        out[name] = run(a.bin, root, name, a.duration, a.every, abused)
    s = [summary(n, out[n]) for n in ("clean", "abused")]
    print("== summary")
    print(f"{'run':8} {'it/s median':>12} {'it/s min':>9} {'RSS first':>10} {'RSS last':>9} "
          f"{'RSS max':>8} {'s0 CPU%':>8}  exit statuses")
    for x in s:
        print(f"{x['run']:8} {x['median_its']:12.0f} {x['min_its']:9.0f} {x['rss_first_mib']:10.1f} "
              f"{x['rss_last_mib']:9.1f} {x['rss_max_mib']:8.1f} {x['server0_cpu_mean_pct']:8.1f}"
              f"  {x['exit']}")
    ratio = s[1]["median_its"] / s[0]["median_its"] if s[0]["median_its"] else 0
    print(f"abused / clean, median iterations per second: {ratio:.2f}")
    print(f"abuse delivered: {s[1]['abuse']}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": s, "runs": out, "ratio": ratio}, f, indent=1)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
