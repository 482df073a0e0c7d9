#!/usr/bin/env python3
"""run.py: the GPU-machine half of scripts/device-check.sh. Unpacks the pack made by pack.py and,
in this order: reports the machine (kernel, glibc, driver and its CUDA version, toolkit, PyTorch);
checks that the packed programs find every library; runs a CPU smoke run; finds the GPU; loads
the CUDA plugins (rebuilding them with this machine's nvcc where the packed ones cannot run);
runs the GPU tests; times the CUDA top-k against torch.topk and the memory-bandwidth bound;
trains the MLP and the CNN on the GPU against the same job on the CPU; then soft-RoCE (rdma_rxe):
the RDMA tests and gravac-bench transport against perftest. Writes device-check.json, a short
device-check.txt and device-check-logs.tar.gz to --out.

Exit status: 0 when every part that ran passed (parts without their hardware are skipped, one
line each); 1 when a part failed, the pack is unusable, or --require-gpu finds no GPU."""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_common as dc  # noqa: E402
import run_gpu  # noqa: E402
import run_rdma  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GPU_PARTS = ["plugins", "gpu_tests", "topk", "training"]
RESERVE_S = 15.0            # kept for the report at the end
LOG_MAX = 2 << 20           # bytes of each log kept in device-check-logs.tar.gz
RDMA_RESERVE_S = 100.0      # kept by the GPU parts for soft-RoCE, where the kernel offers it

# Run in a child Python, so that a hung or crashing driver cannot take this process with it.
CUDA_PROBE = r"""
import ctypes, json
out = {"loaded": False}
try:
    cu = ctypes.CDLL("libcuda.so.1")
    out["loaded"] = True
    for line in open("/proc/self/maps"):
        if "libcuda.so" in line:
            out["path"] = line.split()[-1]
            break
    v = ctypes.c_int(0)
    out["version_rc"] = cu.cuDriverGetVersion(ctypes.byref(v))
    out["driver_cuda"] = v.value
    out["init_rc"] = cu.cuInit(0)
    if out["init_rc"] == 0:
        n = ctypes.c_int(0)
        cu.cuDeviceGetCount(ctypes.byref(n))
        out["count"] = n.value
        out["devices"] = []
        for i in range(n.value):
            d, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
            cu.cuDeviceGet(ctypes.byref(d), i)
            cu.cuDeviceGetName(name, 256, d)
            mj, mn, mem = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_size_t(0)
            cu.cuDeviceGetAttribute(ctypes.byref(mj), 75, d)
            cu.cuDeviceGetAttribute(ctypes.byref(mn), 76, d)
            cu.cuDeviceTotalMem_v2(ctypes.byref(mem), d)
            out["devices"].append({"name": name.value.decode(), "cc": f"{mj.value}{mn.value}",
                                   "mem_mib": mem.value >> 20})
except OSError as e:
    out["error"] = str(e)
print(json.dumps(out))
"""
TORCH_PROBE = r"""
import json
out = {}
try:
    import torch
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["available"] = torch.cuda.is_available()
    if out["available"]:
        out["device"] = torch.cuda.get_device_name()
except Exception as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def ver_tuple(text):
    m = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


class Check:
    def __init__(self, args):
        self.args = args
        self.t0 = time.monotonic()
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="gv-device-check."))
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.parts, self.lines, self.info = {}, [], {}
        self.pack = None            # the unpacked gravac-device folder
        self.manifest = {}
        self.lib_dirs = []          # LD_LIBRARY_PATH of the packed programs, pack's first
        self.device_dirs = []       # where this machine's cuBLAS was found
        self.plugin_dir = None
        self.failed = False
        self.reserve = 0.0          # seconds the GPU parts leave for the RDMA part
        self.orig_ldpath = os.environ.get("LD_LIBRARY_PATH", "")

    # ---- bookkeeping ----
    def remaining(self):
        return self.args.budget - (time.monotonic() - self.t0) - RESERVE_S - self.reserve

    def say(self, text):
        print(text, flush=True)
        self.lines.append(text)

    def record(self, name, status, line=None, **fields):
        self.parts[name] = dict(status=status, **fields)
        if status == "failed":
            self.failed = True
        if line:
            self.say(line)

    def guard(self, name, fn, *args):
        """fn(*args); an exception (a bug here, an output nobody foresaw) fails part `name`
        with its traceback instead of losing the other parts' results."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - reported, never swallowed
            self.record(name, "failed", f"{name}: FAILED: {type(e).__name__}: {e}",
                        traceback=traceback.format_exc())
            return None

    def skip(self, name, reason):
        self.record(name, "skipped", f"skip {name}: {reason}", reason=reason)

    def run(self, name, argv, timeout, env=None, cwd=None, stdout=False):
        """Runs argv with its output in logs/<name>.log; (rc, text, seconds, timed_out). With
        stdout=True, stdout goes to logs/<name>.out and `text` is that alone."""
        log = os.path.join(self.logs, name + ".log")
        sout = os.path.join(self.logs, name + ".out") if stdout else None
        limit = max(1.0, min(timeout, self.remaining()))
        rc, secs, to = dc.run_cmd(argv, log, env=env, timeout=limit, cwd=cwd or self.work,
                                  stdout_path=sout)
        return rc, dc.read_text(sout or log), secs, to

    def gv_env(self, extra=None):
        """The environment of the packed programs: the pack's libraries first, then this
        machine's cuBLAS and whatever LD_LIBRARY_PATH held; the plugins from plugin_dir."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("GV_")}
        dirs = self.lib_dirs + self.device_dirs + [d for d in self.orig_ldpath.split(":") if d]
        env["LD_LIBRARY_PATH"] = ":".join(dirs)
        if self.plugin_dir:
            env["GV_CUDA_PLUGIN_DIR"] = self.plugin_dir
        if self.pack:
            env["RDMAV_DRIVERS"] = ":".join(os.path.join(self.pack, p)
                                            for p in self.manifest.get("rdma_providers", []))
        for kv in extra or []:
            k, _, v = kv.partition("=")
            env[k] = v
        return env

    def pack_path(self, rel):
        return os.path.join(self.pack, rel)

    # ---- parts ----
    def part_env(self):
        info = self.info
        u = platform.uname()
        info["kernel"] = f"{u.system} {u.release} {u.machine}"
        info["glibc"] = " ".join(platform.libc_ver())
        info["python"] = platform.python_version()
        nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                        if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
        info["nvcc_path"] = nvcc
        if nvcc:
            out = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=False).stdout
            m = re.search(r"release (\d+\.\d+)", out)
            info["nvcc"] = m.group(1) if m else "unknown"
        cmake = shutil.which("cmake")
        if cmake:
            out = subprocess.run([cmake, "--version"], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=False).stdout
            info["cmake"] = (out.split() + ["", "", "?"])[2]
        info["dev_nvidia"] = sorted(glob.glob("/dev/nvidia[0-9]*"))
        info["proc_driver"] = dc.read_text("/proc/driver/nvidia/version").split("\n")[0]
        self.nvidia_smi()
        info["libcuda"] = self.child_json("probe-libcuda", CUDA_PROBE, 60)
        info["torch"] = self.child_json("probe-torch", TORCH_PROBE, 120)
        tv = info["torch"]
        torch_s = (f"torch {tv['version']} (CUDA {tv.get('cuda')})" if "version" in tv
                   else f"no torch ({tv.get('error', 'not importable')})")
        self.record("env", "ok", f"env: {info['kernel']}, {info['glibc']}, Python "
                    f"{info['python']}, nvcc {info.get('nvcc', 'none')}, cmake "
                    f"{info.get('cmake', 'none')}, {torch_s}", **info)

    def nvidia_smi(self):
        info = self.info
        smi = shutil.which("nvidia-smi")
        info["nvidia_smi"] = smi
        if not smi:
            return
        rc, text, _, _ = self.run("nvidia-smi", [smi], 30)
        m = re.search(r"CUDA Version:\s*(\d+\.\d+)", text)
        info["smi_cuda"] = m.group(1) if m else None
        rc, text, _, _ = self.run("nvidia-smi-query", [
            smi, "--query-gpu=name,driver_version,memory.total,pci.bus_id",
            "--format=csv,noheader"], 30)
        rows = [r for r in text.splitlines()[1:] if r.strip()]
        info["smi_rc"] = rc
        info["smi_gpus"] = rows if rc == 0 else []
        if rc != 0:
            info["smi_error"] = dc.tail(text, 3)

    def child_json(self, name, code, timeout):
        rc, text, _, to = self.run(name, [sys.executable, "-c", code], timeout,
                                   env=dict(os.environ))
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    break
        return {"error": "timed out" if to else f"exit {rc}: {dc.tail(text, 2)}"}

    def part_gpu(self):
        """1 with a usable GPU; 0 for none (skips); -1 when the GPU stack is broken."""
        info, cu = self.info, self.info["libcuda"]
        seen = []
        if info.get("smi_gpus"):
            seen.append(f"nvidia-smi lists {len(info['smi_gpus'])} GPU(s)")
        if info["dev_nvidia"]:
            seen.append(" ".join(info["dev_nvidia"]))
        if cu.get("loaded"):
            seen.append(f"libcuda.so.1 at {cu.get('path', '?')}")
        if cu.get("loaded") and cu.get("init_rc") == 0 and cu.get("count", 0) > 0:
            d = cu["devices"][0]
            dv = cu.get("driver_cuda", 0)
            drv = info["smi_gpus"][0].split(",")[1].strip() if info.get("smi_gpus") else \
                info["proc_driver"] or "?"
            self.record("gpu", "ok", f"gpu: {d['name']} (sm_{d['cc']}, {d['mem_mib']} MiB), "
                        f"driver {drv} (CUDA {dv // 1000}.{dv % 1000 // 10}), "
                        f"{cu['count']} device(s)", devices=cu["devices"], driver=drv,
                        driver_cuda=dv)
            return 1
        why = []
        if not info.get("nvidia_smi"):
            why.append("no nvidia-smi on PATH")
        elif info.get("smi_rc"):
            why.append(f"nvidia-smi failed: {info.get('smi_error', '')}".strip())
        if not info["dev_nvidia"]:
            why.append("no /dev/nvidia*")
        if not cu.get("loaded"):
            why.append(f"libcuda.so.1 not loadable ({cu.get('error', '?')})")
        elif cu.get("init_rc") not in (None, 0):
            why.append(f"cuInit failed with CUDA error {cu.get('init_rc')}"
                       + (" (no device)" if cu.get("init_rc") == 100 else ""))
        elif cu.get("count", 0) == 0:
            why.append("the driver sees no device")
        broken = bool(seen) and not (cu.get("loaded") and cu.get("init_rc") == 100)
        if broken or self.args.require_gpu:
            found = "; found: " + ", ".join(seen) if seen else ""
            self.record("gpu", "failed", f"gpu: FAILED: no usable GPU: {'; '.join(why)}{found}",
                        reason="; ".join(why), seen=seen)
            return -1
        self.record("gpu", "skipped", f"skip gpu: none found ({'; '.join(why)})",
                    reason="; ".join(why))
        return 0

    def part_pack(self):
        """Unpacks the pack and checks that every packed file finds its libraries."""
        path = os.path.abspath(self.args.pack)
        if not os.path.exists(path):
            self.record("pack", "failed", f"pack: FAILED: no pack at {path}: make it on the "
                        "build machine with scripts/device-check.sh pack and carry it",
                        path=path)
            return False
        if os.path.isdir(path):          # an unpacked pack (its gravac-device folder)
            self.pack = path
        else:
            with tarfile.open(path) as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(self.work, filter="data")
                else:
                    tf.extractall(self.work)
            self.pack = os.path.join(self.work, dc.PACK_NAME)
        try:
            with open(self.pack_path("manifest.json")) as f:
                self.manifest = json.load(f)
        except (OSError, ValueError) as e:
            self.record("pack", "failed", f"pack: FAILED: {path} has no readable manifest: {e}")
            return False
        m = self.manifest
        if m.get("schema") != dc.PACK_SCHEMA:
            self.record("pack", "failed", f"pack: FAILED: manifest schema {m.get('schema')}, "
                        f"this script reads {dc.PACK_SCHEMA}: make the pack again")
            return False
        src = m["source"]
        size = f"{os.path.getsize(path) / 2**20:.1f} MiB" if os.path.isfile(path) else "folder"
        self.say(f"pack: {path} ({size}), commit "
                 f"{src['commit'][:12]}{' (dirty)' if src.get('dirty') else ''}, CUDA "
                 f"{m['build']['cuda_version']} for sm_{','.join(m['build']['cuda_archs'])}, "
                 f"made {m['created']} on {m['host']['os']}")
        for soname in m.get("device_libs", []):
            d = run_gpu.find_device_lib(soname)
            if d and d not in self.device_dirs:
                self.device_dirs.append(d)
        self.lib_dirs = [self.pack_path("lib"), self.pack_path("lib/cuda")]
        bad = self.check_libs()
        if any("libstdc++" in b or "libgcc_s" in b for b in bad):
            self.lib_dirs.append(self.pack_path("lib/compat"))
            bad = self.check_libs()
        missing_device = [s for s in m.get("device_libs", [])
                          if not any(os.path.exists(os.path.join(d, s))
                                     for d in self.device_dirs)]
        fields = {"path": path, "manifest": {k: m[k] for k in ("source", "build", "host",
                                                               "created")},
                  "lib_dirs": self.lib_dirs, "device_lib_dirs": self.device_dirs,
                  "device_libs_missing": missing_device}
        if bad:
            self.record("pack", "failed", "pack: FAILED: a library is not found:\n  "
                        + "\n  ".join(bad[:20]), problems=bad, **fields)
            return False
        compat = " (with the packed libstdc++)" if len(self.lib_dirs) > 2 else ""
        dev = (f"; {', '.join(m.get('device_libs', []))} from {', '.join(self.device_dirs)}"
               if self.device_dirs else "")
        miss = f"; not on this machine: {', '.join(missing_device)}" if missing_device else ""
        self.record("pack", "ok", f"pack: every packed program and library resolves{compat}"
                    f"{dev}{miss}", **fields)
        return True

    def check_libs(self):
        """'file: problem' for every library of a packed ELF file that does not resolve, or
        resolves outside the pack although it is not of the base system (a packed library gone
        missing is found on this machine's system, if at all). This machine's cuBLAS is the
        plugins' part; the packed C++ runtime is used only where lib/compat is on the path."""
        env = self.gv_env()
        compat = self.pack_path("lib/compat") in self.lib_dirs
        bad = []
        for f in dc.elf_files(self.pack):
            res = dc.ldd(f, env)
            rel = os.path.relpath(f, self.pack)
            for soname, p in res["libs"].items():
                cls = dc.lib_class(soname)
                if cls == "base" or cls == "device" or (cls == "compat" and not compat
                                                        and p is not None):
                    continue
                if p is None:
                    bad.append(f"{rel}: {soname} not found")
                elif not os.path.realpath(p).startswith(os.path.realpath(self.pack) + "/"):
                    bad.append(f"{rel}: {soname} not found in the pack (the system's {p})")
            bad += [f"{rel}: {e}" for e in res["errors"]]
        return bad

    def part_host(self):
        """The packed programs run here on the CPU: 5 steps of the MLP on the packed data."""
        argv = [self.pack_path("bin/gravac-worker"), "--standalone", "--model", "mlp",
                "--dataset", "fashion-mnist", "--data-dir", self.pack_path("data"),
                "--steps", "5", "--eval-limit", "500", "--quiet"]
        rc, text, secs, _ = self.run("host-smoke", argv, 60, env=self.gv_env())
        if rc != 0:
            self.record("host", "failed", f"host: FAILED: the packed gravac-worker exited {rc} "
                        f"on the CPU:\n{dc.tail(text, 8)}", rc=rc)
            return False
        self.record("host", "ok", f"host: the packed gravac-worker trains on the CPU "
                    f"(5 steps, {secs:.1f} s)", seconds=secs)
        return True

    # ---- the whole run ----
    def main(self):
        self.say(f"device-check: started {self.started.isoformat(timespec='seconds')}, "
                 f"budget {self.args.budget:.0f} s, work {self.work}")
        self.guard("env", self.part_env)
        gpu = self.guard("gpu", self.part_gpu)
        gpu = -1 if gpu is None else gpu
        if not (self.guard("pack", self.part_pack) and self.guard("host", self.part_host)):
            for p in GPU_PARTS + ["rdma"]:
                self.parts.setdefault(p, {"status": "skipped", "reason": "the pack is unusable"})
            self.say("device-check: stopped: the packed programs cannot run here")
            return
        rdma = self.guard("rdma", run_rdma.detect, self) if self.args.rdma != "off" else None
        if gpu == 1:
            self.reserve = RDMA_RESERVE_S if rdma and rdma["ok"] and \
                self.args.rdma == "auto" else 0.0
            run_gpu.run_all(self)
            self.reserve = 0.0
        else:
            why = "no GPU" if gpu == 0 else "no usable GPU (see gpu)"
            for p in GPU_PARTS:
                self.skip(p, why)
        if rdma is not None or self.args.rdma == "off":
            self.guard("rdma", run_rdma.part_rdma, self, self.args.rdma, rdma)

    def report(self):
        out = os.path.abspath(self.args.out)
        os.makedirs(out, exist_ok=True)
        n = {s: sum(1 for p in self.parts.values() if p["status"] == s)
             for s in ("ok", "failed", "skipped")}
        code = 1 if self.failed else 0
        doc = {"schema": "gravac-device-check/1",
               "started": self.started.isoformat(timespec="seconds"),
               "elapsed_s": round(time.monotonic() - self.t0, 1),
               "args": {k: v for k, v in vars(self.args).items()},
               "parts": self.parts, "counts": n, "exit": code}
        with open(os.path.join(out, "device-check.json"), "w") as f:
            json.dump(doc, f, indent=1, default=str)
            f.write("\n")
        self.say(f"device-check: {n['ok']} parts ok, {n['failed']} failed, {n['skipped']} "
                 f"skipped in {doc['elapsed_s']:.0f} s; exit {code}; {out}/device-check.json")
        with open(os.path.join(out, "device-check.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")
        with tarfile.open(os.path.join(out, "device-check-logs.tar.gz"), "w:gz") as tf:
            for name in sorted(os.listdir(self.logs)):
                path = os.path.join(self.logs, name)
                if os.path.getsize(path) > LOG_MAX:      # what comes back is 16 MiB a file
                    with open(path, "rb") as f:
                        f.seek(-LOG_MAX, os.SEEK_END)
                        data = b"[... cut: the last %d bytes follow]\n" % LOG_MAX + f.read()
                    with open(path, "wb") as f:
                        f.write(data)
                tf.add(path, arcname="logs/" + name)
        return code


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", default=os.path.join(ROOT, "build-device",
                                                   "gravac-device-pack.tar.gz"),
                    help="the tarball from `pack`, or an unpacked gravac-device folder")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "build-device",
                                                                          "out"))
    ap.add_argument("--require-gpu", action="store_true",
                    help="no GPU is a failure (exit 1), not a skip")
    ap.add_argument("--rdma", choices=["auto", "detect", "off"], default="auto",
                    help="auto: set up soft-RoCE and run the RDMA checks where the kernel "
                         "offers it; detect: only say whether it does; off: skip")
    ap.add_argument("--budget", type=float, default=480.0, help="seconds for the whole run")
    ap.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args()
    chk = Check(args)
    try:
        chk.main()
    except KeyboardInterrupt:
        chk.record("interrupted", "failed", "device-check: interrupted")
    finally:
        code = chk.report()
        if not args.keep and not args.work:
            shutil.rmtree(chk.work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
