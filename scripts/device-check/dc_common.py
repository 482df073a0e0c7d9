"""dc_common.py: what both halves of scripts/device-check.sh share: which shared libraries count
as the base system (never packed), how the packed libraries are laid out, ldd parsing, and
running a command with a time limit and a log. Standard library only (Python 3.9+): the GPU
machine has Python but none of this project's Debian packages."""
import os
import re
import shutil
import signal
import subprocess
import time

PACK_NAME = "gravac-device"          # top folder inside the tarball
PACK_SCHEMA = 1                      # manifest.json "schema"; the device half refuses others

# The base system: glibc (whose parts must come from the machine that runs the programs, never
# from a pack) and the NVIDIA driver's libraries. The vDSO is no file at all.
BASE_RE = re.compile(r"^(linux-vdso\.so\.1|linux-gate\.so\.1|ld-linux[-\w.]*\.so\.\d+|"
                     r"lib(c|m|dl|pthread|rt|util|resolv|anl|mvec)\.so\.\d+|"
                     r"libcuda\.so\.\d+|libnvidia-[\w.-]+\.so[.\d]*)$")
# cuBLAS (libcublas 50 MiB + libcublasLt 500 MiB) does not fit a pack: the GPU machine's CUDA
# toolkit or PyTorch provides it (the device half finds it; without one it rebuilds the plugins).
DEVICE_RE = re.compile(r"^libcublas(Lt)?\.so\.\d+$")
# Packed but kept apart, so that the device half can leave them out of LD_LIBRARY_PATH: the CUDA
# runtime (only with the packed plugins; rebuilt ones link the machine's own) and the C++ runtime
# (only where the machine has none, or one too old for the plugins).
CUDA_RE = re.compile(r"^libcudart\.so\.\d+$")
COMPAT_RE = re.compile(r"^(libstdc\+\+\.so\.6|libgcc_s\.so\.1)$")


def lib_class(soname):
    """'base', 'device', 'cuda', 'compat' or 'lib' (pack/lib/) for a library's soname."""
    if BASE_RE.match(soname):
        return "base"
    if DEVICE_RE.match(soname):
        return "device"
    if CUDA_RE.match(soname):
        return "cuda"
    if COMPAT_RE.match(soname):
        return "compat"
    return "lib"


LIB_DIRS = {"lib": "lib", "cuda": "lib/cuda", "compat": "lib/compat"}


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def elf_files(root):
    """Every regular ELF file under root, sorted (symbolic links are not followed)."""
    out = []
    for d, _, files in os.walk(root):
        for name in files:
            p = os.path.join(d, name)
            if not os.path.islink(p) and os.path.isfile(p) and is_elf(p):
                out.append(p)
    return sorted(out)


def _ldd_argv(path):
    ldd = shutil.which("ldd")
    if ldd:
        return [ldd, path]
    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"):
        if os.path.exists(loader):
            return [loader, "--list", path]
    return None


LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")
LDD_VERSION = re.compile(r"(\S+): version `([^']+)' not found \(required by ([^)]+)\)")


def ldd(path, env=None):
    """ldd of one file: {'libs': {soname: path or None}, 'errors': [text], 'static': bool}.
    'errors' holds missing symbol versions ("/x/libstdc++.so.6: version GLIBCXX_3.4.32 not
    found (required by /y/plugin.so)")."""
    argv = _ldd_argv(path)
    if argv is None:
        return {"libs": {}, "errors": ["neither ldd nor the dynamic loader was found"],
                "static": False}
    p = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=60, check=False)
    return parse_ldd(p.stdout)


def parse_ldd(text):
    res = {"libs": {}, "errors": [], "static": "not a dynamic executable" in text or
           "statically linked" in text}
    for line in text.splitlines():
        m = LDD_LINE.match(line)
        if m:
            res["libs"][m.group(1)] = None if m.group(2) == "not found" else m.group(2)
            continue
        v = LDD_VERSION.search(line)
        if v:
            res["errors"].append(f"{v.group(1)}: version {v.group(2)} not found (required by "
                                 f"{v.group(3)})")
    return res


def run_cmd(argv, log, env=None, timeout=60.0, cwd=None, stdout_path=None):
    """Runs argv in its own process group, stdout and stderr to the file `log` (stdout to
    `stdout_path` instead when given); kills the group at the time limit. Returns
    (rc, seconds, timed_out); rc 124 when it timed out, 127 when it could not be started."""
    t0 = time.monotonic()
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    with open(log, "w") as out, open(stdout_path or os.devnull, "w") as sout:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        try:
            p = subprocess.Popen(argv, stdout=sout if stdout_path else out,
                                 stderr=out if stdout_path else subprocess.STDOUT, env=env,
                                 cwd=cwd, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            out.write(f"cannot start {argv[0]}: {e}\n")
            return 127, 0.0, False
        try:
            rc = p.wait(timeout=max(1.0, timeout))
            return rc, time.monotonic() - t0, False
        except subprocess.TimeoutExpired:
            kill_group(p)
            out.write(f"\n[device-check: killed after {timeout:.0f} s]\n")
            return 124, time.monotonic() - t0, True


def kill_group(p):
    """SIGTERM then SIGKILL to the process group of a Popen started with start_new_session."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def read_text(path, limit=1 << 20):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-limit:]
    except OSError:
        return ""


def tail(text, lines=15):
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])
