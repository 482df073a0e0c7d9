"""gravac: data-parallel training with adaptive gradient compression and parameter servers.

The framework-neutral part: a Worker over libgravac (the C library, loaded with ctypes). PyTorch
users want gravac.torch, which builds on it with a Horovod/BytePS-shaped API.
"""

import ctypes

from . import _lib

__all__ = ["GravacError", "JobEnded", "Worker", "options_argv"]
__version__ = "0.1.0"

_LIB = None


def lib():
    """libgravac, loaded on first use."""
    global _LIB
    if _LIB is None:
        _LIB = _lib.load()
    return _LIB


class GravacError(RuntimeError):
    """A libgravac call failed; status is gravac's code, the message the line it logged."""

    def __init__(self, what, status):
        l = lib()
        why = (l.gravac_last_error() or b"").decode("utf-8", "replace")
        name = (l.gravac_status_str(status) or b"?").decode()
        super().__init__("%s: %s%s" % (what, name, (": " + why) if why else ""))
        self.status = status


class JobEnded(Exception):
    """The job ended before this step (worker 0 finished earlier): nothing was applied."""


def options_argv(options=None, config=None, **kw):
    """gravac's command-line form of options: a dict ({"method": "static", "cf": 100}), a list
    of strings (["--method=static"]) and keywords (method="static", fp16=True) in that order;
    True and False are boolean flags."""
    argv = []
    if config is not None:
        argv.append("--config=%s" % config)
    items = []
    if isinstance(options, dict):
        items.extend(options.items())
    elif options is not None:
        argv.extend(str(a) for a in options)
    items.extend(kw.items())
    for k, v in items:
        name = str(k).replace("_", "-")
        if v is True:
            argv.append("--%s" % name)
        elif v is False:
            argv.append("--no-%s" % name)
        elif v is not None:
            argv.append("--%s=%s" % (name, v))
    return argv


class Worker:
    """One gravac worker: options in, a registered layout, then start and steps. Arguments are
    as gravac-worker takes them (see `gravac-worker --help`), plus the GV_* variables and the
    MPI/Slurm rank variables of the environment."""

    def __init__(self, argv=()):
        l = lib()
        args = [b"gravac"] + [a.encode() for a in argv]
        arr = (ctypes.c_char_p * len(args))(*args)
        self._g = ctypes.c_void_p()
        rc = l.gravac_create(len(args), arr, ctypes.byref(self._g))
        if rc != 0:
            self._g = None
            raise GravacError("gravac: the options", rc)
        self.started = False
        self.finished = False
        self.info = _lib.StepInfo()

    def _check(self, rc, what):
        if rc != 0:
            raise GravacError(what, rc)

    @property
    def rank(self):
        return lib().gravac_rank(self._g)

    @property
    def size(self):
        return lib().gravac_size(self._g)

    @property
    def num_servers(self):
        return lib().gravac_num_servers(self._g)

    def add_tensor(self, name, shape):
        dims = (ctypes.c_int64 * max(1, len(shape)))(*[int(d) for d in shape])
        self._check(lib().gravac_add_tensor(self._g, name.encode(), len(shape), dims),
                    "gravac: tensor %s" % name)

    def start(self, params_addr, grads_addr, numel):
        """Connects; params (float32[numel] at params_addr) then hold worker 0's model."""
        self._check(lib().gravac_start(self._g, params_addr, grads_addr, numel),
                    "gravac: start-up")
        self.started = True

    def step(self, loss=float("nan"), compute_s=0.0, samples=1):
        """The averaged gradient replaces the local one in the gradient buffer."""
        self._check(lib().gravac_step(self._g, float(loss), float(compute_s), int(samples),
                                      ctypes.byref(self.info)), "gravac: step")
        if self.info.stopped:
            raise JobEnded("the job ended at iteration %d (worker 0 finished)"
                           % self.info.iteration)
        return self.info

    def set_lr(self, lr):
        """The learning rate of the caller's optimizer from the next step on (0: none)."""
        self._check(lib().gravac_set_lr(self._g, float(lr)), "gravac: learning rate")

    def report_eval(self, loss=float("nan"), accuracy=float("nan")):
        lib().gravac_report_eval(self._g, float(loss), float(accuracy))

    def finish(self):
        if self.started and not self.finished:
            self.finished = True
            self._check(lib().gravac_finish(self._g), "gravac: finish")

    def fail(self, why):
        if self._g is not None:
            lib().gravac_fail(self._g, why.encode("utf-8", "replace")[:400])

    def close(self):
        if self._g is not None:
            lib().gravac_destroy(self._g)
            self._g = None
