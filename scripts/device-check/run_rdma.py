"""run_rdma.py: the RDMA part of the device half (run.py). Finds whether the kernel offers
soft-RoCE (the rdma_rxe module, or built in); if it does (and --rdma auto), makes an rxe device
on a veth pair it creates (loopback as the fallback), runs the RDMA tests against it, and times
gravac-bench transport --transport rdma against perftest's ib_write_bw and ib_send_lat on the same
device; then removes what it made. Needs root (module loading, links)."""
import glob
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import time

import dc_common as dc
import run_gpu

RXE = "gvrxe0"
VETH = ("gvdc0", "gvdc1")
VETH_ADDR = "10.213.7.1"     # on this machine only: both ends of the veth pair are ours
BW_SIZES = ["65536", "1048576"]
PORT0 = 18620


def detect(chk):
    """What the kernel offers: {'ok': bool, 'how': ..., 'why': [...], ...}."""
    rel = platform.release()
    d = {"kernel": rel, "devices": sorted(os.listdir("/sys/class/infiniband"))
         if os.path.isdir("/sys/class/infiniband") else [], "why": []}
    d["modprobe"] = shutil.which("modprobe") or next(
        (p for p in ("/sbin/modprobe", "/usr/sbin/modprobe") if os.path.exists(p)), None)
    moddir = f"/lib/modules/{rel}"
    if os.path.isdir("/sys/module/rdma_rxe"):
        d.update(ok=True, how="rdma_rxe is loaded or built in")
        return d
    builtin = dc.read_text(os.path.join(moddir, "modules.builtin"))
    if re.search(r"/rdma_rxe\.ko", builtin):
        d.update(ok=True, how="rdma_rxe is built in")
        return d
    files = glob.glob(os.path.join(moddir, "**", "rdma_rxe.ko*"), recursive=True)
    if files and d["modprobe"]:
        d.update(ok=True, how=f"module {files[0]}")
        return d
    if not os.path.isdir(moddir):
        d["why"].append(f"no {moddir} (the kernel has no loadable modules here)")
    elif not files:
        d["why"].append(f"no rdma_rxe module in {moddir}")
    else:
        d["why"].append("rdma_rxe is there but modprobe is not")
    d["why"].append("rdma_rxe is not built in (/sys/module/rdma_rxe absent)")
    d["ok"] = False
    return d


def setup(chk, st):
    """Loads the modules and makes the rxe device; fills st['addr'], st['netdev']."""
    ip, rdma = chk.pack_path("tools/ip"), chk.pack_path("tools/rdma")
    env = chk.gv_env()
    if not os.path.isdir("/sys/module/rdma_rxe") and st["modprobe"]:
        rc, text, _, _ = chk.run("rdma-modprobe", [st["modprobe"], "rdma_rxe"], 30)
        if rc != 0:
            return f"modprobe rdma_rxe failed: {dc.tail(text, 2)}"
    if st["modprobe"]:
        chk.run("rdma-modprobe-ucm", [st["modprobe"], "rdma_ucm"], 30)   # /dev/infiniband/rdma_cm
    steps = [[ip, "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]],
             [ip, "addr", "add", VETH_ADDR + "/24", "dev", VETH[0]],
             [ip, "link", "set", VETH[0], "up"], [ip, "link", "set", VETH[1], "up"]]
    st["netdev"], st["addr"] = VETH[0], VETH_ADDR
    for i, argv in enumerate(steps):
        rc, text, _, _ = chk.run(f"rdma-veth-{i}", argv, 20, env=env)
        if rc != 0:
            st["veth_error"] = dc.tail(text, 2)
            chk.run("rdma-veth-del", [ip, "link", "del", VETH[0]], 20, env=env)
            st["netdev"], st["addr"] = "lo", "127.0.0.1"
            break
    st["made_veth"] = st["netdev"] != "lo"
    rc, text, _, _ = chk.run("rdma-link-add", [rdma, "link", "add", RXE, "type", "rxe",
                                               "netdev", st["netdev"]], 20, env=env)
    if rc != 0:
        return f"rdma link add {RXE} type rxe netdev {st['netdev']} failed: {dc.tail(text, 2)}"
    st["made_rxe"] = True
    state = f"/sys/class/infiniband/{RXE}/ports/1/state"
    for _ in range(50):
        if "ACTIVE" in dc.read_text(state):
            break
        time.sleep(0.1)
    st["port_state"] = dc.read_text(state).strip()
    if "ACTIVE" not in st["port_state"]:
        return f"{RXE} port 1 is '{st['port_state']}', not ACTIVE"
    return None


def teardown(chk, st):
    env = chk.gv_env()
    if st.get("made_rxe"):
        chk.run("rdma-link-del", [chk.pack_path("tools/rdma"), "link", "delete", RXE], 20,
                env=env)
    if st.get("made_veth"):
        chk.run("rdma-veth-del", [chk.pack_path("tools/ip"), "link", "del", VETH[0]], 20,
                env=env)


def perftest_table(text):
    """The result rows of ib_write_bw / ib_send_lat output, as dicts by column name."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("#bytes"):
            # names hold spaces ("BW peak[Gb/sec]", "99% percentile[usec]") and are not always
            # two spaces apart ("#bytes #iterations"): a name ends at "]" or is one "#word"
            cols, cur = [], []
            for tok in line.split():
                cur.append(tok)
                if tok.startswith("#") or "]" in tok:
                    cols.append(" ".join(cur))
                    cur = []
            rows = []
            for row in lines[i + 1:]:
                vals = row.split()
                if not vals or not re.match(r"^\d+$", vals[0]):
                    break
                rows.append(dict(zip(cols, vals)))
            return rows
    return []


def perftest(chk, tool, args, port):
    """One perftest pair on the rxe device: the server in the background, the client here."""
    exe = chk.pack_path("tools/" + tool)
    common = [exe, "-d", RXE, "-R", "-F", "-p", str(port)] + args
    env = chk.gv_env()
    slog = os.path.join(chk.logs, f"perf-{tool}-{port}-server.log")
    with open(slog, "w") as out:
        srv = subprocess.Popen(common, stdout=out, stderr=subprocess.STDOUT, env=env,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    rows, rc = [], None
    try:
        for attempt in range(3):
            time.sleep(0.5 + attempt)
            rc, text, _, _ = chk.run(f"perf-{tool}-{port}-client", common + [chk.rdma_addr], 40)
            rows = perftest_table(text)
            if rc == 0 and rows:
                break
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dc.kill_group(srv)
    return {"tool": tool, "args": args, "rc": rc, "rows": rows}


def bench(chk):
    env = chk.gv_env()
    out = {}
    base = [chk.pack_path("bin/gravac-bench"), "transport", "--loopback", "--bind", chk.rdma_addr,
            "--transport", "rdma", "--json"]
    for mode, extra in (("stream", ["--mode", "stream", "--sizes", "4K,64K,1M",
                                    "--duration", "1"]),
                        ("pingpong", ["--mode", "pingpong", "--sizes", "64,4K", "--iters",
                                      "2000", "--busy-poll"])):
        rc, text, _, _ = chk.run(f"rdma-bench-{mode}", base + extra, 60, env=env, stdout=True)
        try:
            out[mode] = json.loads(text)
        except ValueError:
            out[mode] = {"ok": False, "rc": rc}
    port = PORT0
    out["ib_write_bw"] = []
    for size in BW_SIZES:
        out["ib_write_bw"].append(perftest(chk, "ib_write_bw", ["--report_gbits", "-s", size,
                                                                "-D", "1"], port))
        port += 1
    out["ib_send_lat"] = perftest(chk, "ib_send_lat", ["-s", "64", "-n", "2000"], port)
    return out


def bench_lines(b):
    lines = []
    for r in b.get("stream", {}).get("results", []):
        pt = next((p for p in b["ib_write_bw"] if p["rows"] and
                   p["rows"][0].get("#bytes") == str(r["bytes"])), None)
        ref = float(pt["rows"][0].get("BW average[Gb/sec]", 0)) if pt else 0
        lines.append(f"  rdma stream {r['bytes']} B: gravac {r['gbps']:.2f} Gb/s"
                     + (f", ib_write_bw {ref:.2f} Gb/s ({r['gbps'] / ref:.2f}x)" if ref else ""))
    lat = b.get("ib_send_lat", {}).get("rows", [])
    ref = float(lat[0].get("t_typical[usec]", 0)) if lat else 0
    for r in b.get("pingpong", {}).get("results", [])[:1]:
        p50 = r["lat_us"]["p50"]
        lines.append(f"  rdma ping-pong {r['bytes']} B: gravac p50 {p50:.2f} us"
                     + (f", ib_send_lat t_typical {ref:.2f} us ({p50 / ref:.2f}x)" if ref else ""))
    return lines


def part_rdma(chk, mode, st):
    """st: detect()'s answer (None with --rdma off)."""
    if mode == "off":
        chk.skip("rdma", "--rdma off")
        return
    if not st["ok"]:
        extra = f" (RDMA devices present: {', '.join(st['devices'])})" if st["devices"] else ""
        chk.record("rdma", "skipped", f"skip rdma: the kernel offers no soft-RoCE: "
                   f"{'; '.join(st['why'])}{extra}", reason="; ".join(st["why"]), detect=st)
        return
    if mode == "detect":
        chk.record("rdma", "skipped", f"skip rdma: soft-RoCE is offered ({st['how']}), not "
                   "set up (--rdma detect)", reason="--rdma detect", detect=st)
        return
    if chk.remaining() < 60:
        chk.record("rdma", "failed", "rdma: FAILED: out of time", detect=st)
        return
    try:    # registered memory is pinned: the children inherit this
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY,
                                                     resource.RLIM_INFINITY))
    except (ValueError, OSError) as e:
        st["memlock"] = f"cannot raise RLIMIT_MEMLOCK: {e}"
    try:
        why = setup(chk, st)
        if why:
            chk.record("rdma", "skipped", f"skip rdma: soft-RoCE could not be set up: {why}",
                       reason=why, detect=st)
            return
        chk.rdma_addr = st["addr"]
        chk.say(f"rdma: {RXE} on {st['netdev']} ({st['addr']}), {st['how']}")
        tests = run_gpu.run_tests(chk, "rdma", [f"GV_RDMA_TEST_ADDR={st['addr']}",
                                                f"GV_RDMA_DEVICE={RXE}"])
        must = {"test_rdma_device", "test_tp_conformance_rdma"}
        bad = [t["name"] for t in tests if t["status"] in ("failed", "timeout", "not run") or
               (t["name"] in must and t["status"] != "passed")]
        b = bench(chk) if chk.remaining() > 30 else {}
        for line in bench_lines(b):
            chk.say(line)
        chk.record("rdma", "failed" if bad else "ok",
                   f"rdma: {sum(t['status'] == 'passed' for t in tests)} of {len(tests)} tests "
                   f"passed" + (f"; FAILED: {', '.join(bad)}" if bad else ""),
                   detect=st, tests=tests, bench=b)
    finally:
        teardown(chk, st)
