"""ctypes declarations of libgravac (libgravac/gravac.h) and where the library is found.

ctypes rather than a CPython extension or cffi: it is in Python's standard library (nothing to
build against python3-dev, nothing from outside Debian), the interface is a dozen calls with
plain C types, and a call costs a few microseconds, which is nothing next to a training step
(docs/torch.md measures it). The buffers are passed as addresses of torch tensors' storage:
no copy.
"""

import ctypes
import os

API_VERSION = 2


class StepInfo(ctypes.Structure):
    """struct gravac_step_info."""

    _fields_ = [
        ("iteration", ctypes.c_uint64),
        ("level", ctypes.c_int32),
        ("stopped", ctypes.c_int32),
        ("cf", ctypes.c_double),
        ("cf_candidate", ctypes.c_double),
        ("theta_min", ctypes.c_double),
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_recv", ctypes.c_uint64),
        ("nnz_sent", ctypes.c_uint64),
        ("compress_s", ctypes.c_double),
        ("comm_s", ctypes.c_double),
        ("step_s", ctypes.c_double),
        ("checks", ctypes.c_uint64),
        ("dense_bytes", ctypes.c_uint64),
    ]


LEVELS = {0: "dense", 1: "floor", 2: "candidate"}


def _candidates():
    """Where libgravac may be, in order: $GRAVAC_LIBRARY; the build tree (build/python/gravac
    next to build/lib); an installed tree (_install.py says where, relative to the prefix); the
    system's loader path."""
    env = os.environ.get("GRAVAC_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "lib", "libgravac.so")
    try:
        from . import _install
    except ImportError:
        _install = None
    if _install is not None:
        depth = len([p for p in _install.PYDIR.split("/") if p]) + 1
        prefix = here
        for _ in range(depth):
            prefix = os.path.dirname(prefix)
        yield os.path.join(prefix, _install.LIBDIR, _install.SONAME)
    yield "libgravac.so.0"


def load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        _declare(lib)
        lib.gv_path = path
        if lib.gravac_api_version() != API_VERSION:
            raise ImportError("%s speaks API version %d, this package %d"
                              % (path, lib.gravac_api_version(), API_VERSION))
        if lib.gravac_step_info_size() != ctypes.sizeof(StepInfo):
            raise ImportError("%s: struct gravac_step_info has %d bytes, this package expects %d"
                              % (path, lib.gravac_step_info_size(), ctypes.sizeof(StepInfo)))
        return lib
    raise ImportError("cannot load libgravac; tried: " + "; ".join(tried)
                      + " (set GRAVAC_LIBRARY to its path)")


def _declare(lib):
    P = ctypes.c_void_p
    c_int, c_double, c_size, c_u64 = ctypes.c_int, ctypes.c_double, ctypes.c_size_t, ctypes.c_uint64
    sigs = {
        "gravac_api_version": (c_int, []),
        "gravac_step_info_size": (c_size, []),
        "gravac_status_str": (ctypes.c_char_p, [c_int]),
        "gravac_last_error": (ctypes.c_char_p, []),
        "gravac_create": (c_int, [c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(P)]),
        "gravac_destroy": (None, [P]),
        "gravac_rank": (c_int, [P]),
        "gravac_size": (c_int, [P]),
        "gravac_num_servers": (c_int, [P]),
        "gravac_add_tensor": (c_int, [P, ctypes.c_char_p, c_int, ctypes.POINTER(ctypes.c_int64)]),
        "gravac_start": (c_int, [P, P, P, c_size]),
        "gravac_step": (c_int, [P, c_double, c_double, c_u64, ctypes.POINTER(StepInfo)]),
        "gravac_set_lr": (c_int, [P, c_double]),
        "gravac_report_eval": (c_int, [P, c_double, c_double]),
        "gravac_finish": (c_int, [P]),
        "gravac_fail": (None, [P, ctypes.c_char_p]),
    }
    for name, (res, args) in sigs.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
