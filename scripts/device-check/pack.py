#!/usr/bin/env python3
"""pack.py: the build-machine half of scripts/device-check.sh. From a release build with CUDA
(build/ by default), makes one tarball that a GPU machine with none of this project's Debian
libraries can run: the programs, the CUDA plugins, the GPU and RDMA test programs, perftest's
ib_write_bw/ib_send_lat and iproute2's rdma and ip with the rxe verbs provider, every shared
library they link except the base system (glibc, the NVIDIA driver) and cuBLAS (too large: the
GPU machine's CUDA provides it), a Fashion-MNIST subset, torch_topk.py, the plugins' sources for a
rebuild there, and manifest.json describing it all. Checks before it writes the tarball that ldd
of every packed file resolves with only the pack and the base system.

    python3 scripts/device-check/pack.py [--build-dir build] [--out FILE] [--train-images N]
"""
import argparse
import datetime
import glob
import gzip
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dc_common as dc  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROGRAMS = ["gravac-worker", "gravac-server", "gravac-bench", "gravac-launch"]
PLUGINS = {"nn": "libgravac_nn_cuda.so", "compress": "libgravac_compress_cuda.so"}
TOOLS = ["ib_write_bw", "ib_send_lat", "rdma", "ip"]
GROUPS = [("gpu", re.compile(r"cuda|gpu")), ("rdma", re.compile(r"rdma|conformance"))]
DATA_DIR = "/usr/share/datasets/fashion-mnist"
DATA_FILES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
              "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
SOURCE_DIRS = ["common", "compress", "nn", "scripts/device-check/plugins"]
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cmake", "CMakeLists.txt")
MAX_BYTES = 60 << 20   # the device tool carries 64 MiB with the working tree


class PackError(Exception):
    pass


def sh(argv, cwd=None):
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, check=False)
    return p.returncode, p.stdout


def copy_file(src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copyfile(os.path.realpath(src), dst)
    shutil.copymode(os.path.realpath(src), dst)


def find_tool(name):
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    p = shutil.which(name, path=path)
    if p is None:
        raise PackError(f"{name} not found (scripts/deps.txt lists its package; run "
                        f"scripts/setup.sh)")
    return p


class Packer:
    def __init__(self, args):
        self.build = os.path.realpath(args.build_dir)
        self.out = os.path.abspath(args.out)
        stage = args.stage or os.path.join(os.path.dirname(self.out), "stage")
        self.stage = os.path.abspath(stage)
        self.top = os.path.join(self.stage, dc.PACK_NAME)
        self.train_n = args.train_images
        self.manifest = {"schema": dc.PACK_SCHEMA, "name": dc.PACK_NAME}
        self.elfs = {}      # pack-relative path -> original path, for the closure
        self.libs = {}      # soname -> {class, from, bytes}

    # ---- what goes in ----
    def check_build(self):
        if not os.path.exists(os.path.join(self.build, "CMakeCache.txt")):
            raise PackError(f"{self.build} is not a configured build (run scripts/setup.sh)")
        for f in PROGRAMS + list(PLUGINS.values()):
            if not os.path.exists(os.path.join(self.build, "bin", f)):
                why = " (the build has no CUDA: is nvcc installed?)" if f.endswith(".so") else ""
                raise PackError(f"{self.build}/bin/{f} is missing{why}")

    def add_programs(self):
        for f in PROGRAMS + list(PLUGINS.values()):
            self.add_elf(os.path.join(self.build, "bin", f), "bin/" + f)
        plugins = {}
        for key, f in PLUGINS.items():
            rc, out = sh(["readelf", "-d", os.path.join(self.build, "bin", f)])
            needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
            if rc != 0 or not needed:
                raise PackError(f"readelf -d {f} failed (binutils missing?)")
            plugins[key] = {"file": "bin/" + f, "needed": needed}
        self.manifest["plugins"] = plugins

    def add_elf(self, src, rel):
        copy_file(src, os.path.join(self.top, rel))
        self.elfs[rel] = src

    def map_arg(self, arg, copied):
        """A test argument that names a file of the build or source tree, as a pack path."""
        if not arg.startswith("/"):
            return arg
        if arg == os.path.join(self.build, "bin") or arg.startswith(self.build + "/bin/"):
            return "@PACK@/bin" + arg[len(self.build) + 4:]
        if arg.startswith(self.build + "/") or arg.startswith(ROOT + "/"):
            if not os.path.isfile(arg):
                raise PackError(f"a test argument names {arg}, which is not a file")
            rel = "tests/" + os.path.basename(arg)
            if rel not in copied:
                if dc.is_elf(arg):
                    self.add_elf(arg, rel)
                else:
                    copy_file(arg, os.path.join(self.top, rel))
                copied.add(rel)
            return "@PACK@/" + rel
        return arg

    def add_tests(self):
        rc, out = sh(["ctest", "--show-only=json-v1"], cwd=self.build)
        if rc != 0:
            raise PackError(f"ctest --show-only failed in {self.build}")
        tests, copied = [], set()
        for t in json.loads(out).get("tests", []):
            group = next((g for g, rx in GROUPS if rx.search(t["name"])), None)
            if group is None or not t.get("command"):
                continue
            props = {p["name"]: p["value"] for p in t.get("properties", [])}
            cmd = list(t["command"])
            exe = cmd[0]
            if exe.startswith(self.build + "/") or exe.startswith(ROOT + "/"):
                argv = [self.map_arg(exe, copied)]
            else:
                argv = [os.path.basename(exe)]     # an interpreter: sh, bash
            argv += [self.map_arg(a, copied) for a in cmd[1:]]
            tests.append({"name": t["name"], "group": group, "argv": argv,
                          "timeout": float(props.get("TIMEOUT", 120)),
                          "skip_rc": int(props.get("SKIP_RETURN_CODE", 77)),
                          "env": list(props.get("ENVIRONMENT", []))})
        for g, _ in GROUPS:
            if not any(t["group"] == g for t in tests):
                raise PackError(f"ctest in {self.build} lists no {g} test")
        self.manifest["tests"] = tests

    def add_tools(self):
        tools = {}
        for name in TOOLS:
            self.add_elf(find_tool(name), "tools/" + name)
            tools[name] = "tools/" + name
        self.manifest["tools"] = tools
        found = sorted(glob.glob("/usr/lib/*/libibverbs/librxe-rdmav*.so"))
        if not found:
            raise PackError("the rxe verbs provider (librxe-rdmav*.so, package "
                            "ibverbs-providers) is missing")
        name = os.path.basename(found[-1])
        self.add_elf(found[-1], "lib/" + name)
        # libibverbs loads "<RDMAV_DRIVERS entry>-rdmavNN.so" for an absolute entry
        self.manifest["rdma_providers"] = ["lib/" + name.split("-rdmav")[0]]

    def add_libs(self):
        """Every library ldd finds for the packed ELF files, by class (dc.lib_class)."""
        device_libs = set()
        for rel, src in sorted(self.elfs.items()):
            res = dc.ldd(src)
            for soname, path in res["libs"].items():
                cls = dc.lib_class(soname)
                if cls == "base":
                    continue
                if cls == "device":
                    device_libs.add(soname)
                    continue
                if path is None:
                    raise PackError(f"{src} needs {soname}, which ldd does not find here")
                known = self.libs.get(soname)
                if known is not None:
                    if os.path.realpath(known["from"]) != os.path.realpath(path):
                        raise PackError(f"{soname} comes from both {known['from']} and {path}")
                    continue
                dst = os.path.join(self.top, dc.LIB_DIRS[cls], soname)
                copy_file(path, dst)
                self.libs[soname] = {"soname": soname, "class": cls, "from": path,
                                     "bytes": os.path.getsize(dst)}
        self.manifest["libs"] = [self.libs[k] for k in sorted(self.libs)]
        self.manifest["device_libs"] = sorted(device_libs)

    def add_data(self):
        for f in DATA_FILES:
            if not os.path.exists(os.path.join(DATA_DIR, f)):
                raise PackError(f"{DATA_DIR}/{f} is missing (package dataset-fashion-mnist)")
        os.makedirs(os.path.join(self.top, "data"), exist_ok=True)
        n = self.idx_subset("train-images-idx3-ubyte.gz", self.train_n)
        self.idx_subset("train-labels-idx1-ubyte.gz", self.train_n)
        for f in DATA_FILES[2:]:
            copy_file(os.path.join(DATA_DIR, f), os.path.join(self.top, "data", f))
        self.manifest["data"] = {"dir": "data", "dataset": "fashion-mnist", "from": DATA_DIR,
                                 "train": n, "test": "all"}

    def idx_subset(self, name, count):
        """The first `count` items of an IDX file (header count rewritten), gzipped."""
        with gzip.open(os.path.join(DATA_DIR, name), "rb") as f:
            head = f.read(8)
            magic, total = struct.unpack(">II", head)
            dims = [struct.unpack(">I", f.read(4))[0] for _ in range((magic & 0xff) - 1)]
            item = 1
            for d in dims:
                item *= d
            n = min(count, total)
            body = f.read(n * item)
        if len(body) != n * item:
            raise PackError(f"{DATA_DIR}/{name} is truncated")
        hdr = struct.pack(">II", magic, n) + b"".join(struct.pack(">I", d) for d in dims)
        with gzip.GzipFile(os.path.join(self.top, "data", name), "wb", compresslevel=6,
                           mtime=0) as g:
            g.write(hdr + body)
        return n

    def add_sources(self):
        for d in SOURCE_DIRS:
            for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
                for f in files:
                    if f.endswith(SOURCE_EXT):
                        src = os.path.join(dirpath, f)
                        copy_file(src, os.path.join(self.top, "src", os.path.relpath(src, ROOT)))
        copy_file(os.path.join(ROOT, "compress/tools/torch_topk.py"),
                  os.path.join(self.top, "tools/torch_topk.py"))
        self.manifest["plugin_sources"] = "src"
        self.manifest["torch_topk"] = "tools/torch_topk.py"

    def add_env_sh(self):
        prov = self.manifest["rdma_providers"][0]
        text = (
            "# . gravac-device/env.sh: the environment scripts/device-check.sh gives the packed\n"
            "# programs when it uses the packed plugins (for trying them by hand).\n"
            'd=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)\n'
            'export LD_LIBRARY_PATH="$d/lib:$d/lib/cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n'
            'export GV_CUDA_PLUGIN_DIR="$d/bin"\n'
            f'export RDMAV_DRIVERS="$d/{prov}"\n'
            "# add lib/compat where the machine has no libstdc++.so.6, and the directory of\n"
            "# libcublas.so.N where the loader does not find it\n")
        with open(os.path.join(self.top, "env.sh"), "w") as f:
            f.write(text)

    def describe(self):
        rc, commit = sh(["git", "rev-parse", "HEAD"], cwd=ROOT)
        rc2, status = sh(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT)
        cuda = ""
        for f in glob.glob(os.path.join(self.build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake")):
            m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', dc.read_text(f))
            cuda = m.group(1) if m else cuda
        archs = set()
        for f in glob.glob(os.path.join(self.build, "*", "CMakeFiles", "gravac_*_cuda.dir",
                                        "flags.make")):
            archs.update(re.findall(r"code=\[?[\w,]*sm_(\d+)", dc.read_text(f)))
        btype = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$",
                          dc.read_text(os.path.join(self.build, "CMakeCache.txt")), re.M)
        osrel = re.search(r'^PRETTY_NAME="?([^"\n]*)', dc.read_text("/etc/os-release"), re.M)
        self.manifest.update({
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "source": {"commit": commit.strip() if rc == 0 else "unknown",
                       "dirty": bool(status.strip()) if rc2 == 0 else None},
            "build": {"dir": self.build, "type": btype.group(1) if btype else "",
                      "cuda_version": cuda, "cuda_archs": sorted(archs, key=int)},
            "host": {"os": osrel.group(1) if osrel else platform.platform(),
                     "glibc": "-".join(platform.libc_ver())},
        })
        if not cuda:
            raise PackError(f"no CUDA compiler version in {self.build}/CMakeFiles")

    # ---- checks and the tarball ----
    def verify(self):
        """ldd of every packed ELF file with only the pack's folders added: each library must
        resolve inside the pack, or be of the base system, or be cuBLAS (the machine's)."""
        env = dict(os.environ)
        dirs = [os.path.join(self.top, d) for d in ("lib", "lib/cuda", "lib/compat")]
        env["LD_LIBRARY_PATH"] = ":".join(dirs)
        files, bad = dc.elf_files(self.top), []
        for f in files:
            res = dc.ldd(f, env)
            for soname, path in res["libs"].items():
                cls = dc.lib_class(soname)
                if cls in ("base", "device"):
                    continue
                if path is None or not os.path.realpath(path).startswith(self.top + "/"):
                    bad.append(f"{os.path.relpath(f, self.top)}: {soname} => {path}")
            bad += [f"{os.path.relpath(f, self.top)}: {e}" for e in res["errors"]]
        if bad:
            raise PackError("the pack does not hold every library:\n  " + "\n  ".join(bad))
        self.manifest["verify"] = {"elf_files": len(files), "ok": True}

    def write(self):
        with open(os.path.join(self.top, "manifest.json"), "w") as f:
            json.dump(self.manifest, f, indent=1)
            f.write("\n")
        os.makedirs(os.path.dirname(self.out), exist_ok=True)
        tmp = self.out + ".tmp"
        rc, _ = sh(["tar", "-C", self.stage, "--sort=name", "--owner=0", "--group=0",
                    "--numeric-owner", "-czf", tmp, dc.PACK_NAME])
        if rc != 0:
            raise PackError(f"tar into {tmp} failed")
        size = os.path.getsize(tmp)
        if size > MAX_BYTES:
            os.unlink(tmp)
            raise PackError(f"the pack is {size / 2**20:.1f} MiB, over {MAX_BYTES >> 20} MiB")
        os.replace(tmp, self.out)
        return size

    def run(self):
        self.check_build()
        shutil.rmtree(self.stage, ignore_errors=True)
        os.makedirs(self.top)
        self.describe()
        self.add_programs()
        self.add_tests()
        self.add_tools()
        self.add_libs()
        self.add_data()
        self.add_sources()
        self.add_env_sh()
        self.verify()
        size = self.write()
        m = self.manifest
        lib_bytes = sum(x["bytes"] for x in m["libs"])
        print(f"device-check pack: {self.out}: {size / 2**20:.1f} MiB "
              f"({m['verify']['elf_files']} ELF files, {len(m['libs'])} libraries of "
              f"{lib_bytes / 2**20:.1f} MiB, {len(m['tests'])} tests, Fashion-MNIST "
              f"{m['data']['train']} train + all test images; CUDA {m['build']['cuda_version']}, "
              f"commit {m['source']['commit'][:12]}{' dirty' if m['source']['dirty'] else ''})")
        print(f"device-check pack: from the GPU machine's CUDA: {', '.join(m['device_libs'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build-device",
                                                  "gravac-device-pack.tar.gz"))
    ap.add_argument("--stage", help="staging folder (default: beside --out)")
    ap.add_argument("--train-images", type=int, default=20000,
                    help="Fashion-MNIST training images packed (default 20000)")
    ap.add_argument("--keep-stage", action="store_true")
    args = ap.parse_args()
    p = Packer(args)
    try:
        p.run()
    except PackError as e:
        print(f"device-check pack: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.keep_stage:
            shutil.rmtree(p.stage, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
