"""bench_torch_net.py: the shaped network of bench_torch.py ddp, as gravac-bench train builds it
(bench/bench_train_net.c): every process in its own network namespace, one veth to a bridge in
a hub namespace, tc tbf on both ends of every veth (the node's egress and the hub's egress
towards it), so each process has a full-duplex link of the given rate. Namespaces are named
gvtt<pid>-*, removed on every exit path, and ones left by a dead run are removed at start.
Needs root (ip netns) and iproute2; nothing is created in the namespace the bench runs in."""

import os
import re
import signal
import subprocess


def sh(*cmd, check=True):
    p = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and p.returncode != 0:
        raise RuntimeError("'%s' failed: %s" % (" ".join(cmd), p.stdout.decode().strip()))
    return p.stdout.decode()


def rate_bytes(rate):
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit)", rate)
    if not m:
        raise ValueError("rate %r is not a tc rate (100mbit, 1gbit)" % rate)
    return float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)] / 8


def remove_stale():
    for line in sh("ip", "netns", "list", check=False).splitlines():
        m = re.match(r"gvtt(\d+)-\S+", line)
        if not m or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its bench is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        sh("ip", "netns", "del", m.group(0), check=False)


class Net:
    """n nodes named node0.. with addresses 10.202.0.(1+i)/16."""

    def __init__(self, n):
        self.prefix = "gvtt%d" % os.getpid()
        self.hub = self.prefix + "-hub"
        self.n = n
        self.made = []
        sh("ip", "netns", "add", self.hub)
        self.made.append(self.hub)
        sh("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.hub, "link", "set", "br0", "up")
        sh("ip", "-n", self.hub, "link", "set", "lo", "up")
        for i in range(n):
            ns, port = self.ns(i), "p%d" % i
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", self.hub, "link", "add", port, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            sh("ip", "-n", ns, "addr", "add", self.ip(i) + "/16", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", self.hub, "link", "set", port, "master", "br0")
            sh("ip", "-n", self.hub, "link", "set", port, "up")

    def ns(self, i):
        return "%s-n%d" % (self.prefix, i)

    @staticmethod
    def ip(i):
        return "10.202.0.%d" % (1 + i)

    def shape(self, rate, latency="100ms", burst=0):
        # the bucket: 4 ms at the rate, at least 64 KiB (as gravac-bench train), unless given
        burst = "%d" % (burst or max(65536, int(rate_bytes(rate) * 0.004)))
        for i in range(self.n):
            for where, dev in ((self.ns(i), "eth0"), (self.hub, "p%d" % i)):
                sh("tc", "-n", where, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
                   "burst", burst, "latency", latency)

    def popen(self, i, cmd, env, log):
        f = open(log, "w")
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        return subprocess.Popen(["ip", "netns", "exec", self.ns(i)] + cmd, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def destroy(self):
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)
        self.made = []


def stop(procs, grace=5.0):
    """SIGTERM to every process group still running, SIGKILL after grace seconds."""
    import time
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    end = time.time() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, end - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
