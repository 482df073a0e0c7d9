"""gravac.torch: train any PyTorch model through gravac, with Horovod's and BytePS's shape.

    import gravac.torch as gv
    gv.init()                                              # 1: options from gravac-launch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = gv.DistributedOptimizer(opt, model.named_parameters(), batch_size=64)   # 2
    gv.broadcast_parameters(model.state_dict(), root_rank=0)                       # 3
    ... train on this worker's shard: gv.rank() of gv.size() ...                   # 4

    gravac-launch --servers 2 --workers 4 -- python3 train.py

What happens (docs/torch.md): DistributedOptimizer puts the parameters and their gradients in two
flat float32 buffers (each parameter and its .grad become views into them: nothing is copied per
step), registers every tensor's name and shape with libgravac, and connects: the servers learn
the model's layout from the workers, worker 0 seeds them, and every worker starts from worker
0's parameters. Each step() pushes the gradient (compressed with error feedback, at the CF the
servers' controller decides) and writes the average over the workers into .grad, bit for bit the
same on every worker; then the wrapped optimizer steps. The servers check with every push that
the workers' parameters are still bitwise equal.
"""

import atexit
import os
import sys
import time

import torch

import gravac

__all__ = ["init", "shutdown", "rank", "size", "local_rank", "num_servers",
           "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
           "last_step", "report", "binding_stats", "GravacError", "JobEnded"]

GravacError = gravac.GravacError
JobEnded = gravac.JobEnded


class _State:
    worker = None
    argv = []
    optimizer = None
    failed = False
    hooks = False
    last = None
    binding = {"steps": 0, "sync_s": 0.0, "lib_s": 0.0}


_S = _State()


def init(options=None, config=None, **kw):
    """Reads gravac's options: the GV_* variables gravac-launch sets (or mpirun's and srun's
    rank variables), a config file (config=, or GV_CONFIG), and options given here as a dict,
    a list of "--name=value" strings, or keywords (method="static", cf=100). Connects nothing:
    DistributedOptimizer does. Returns (rank, size)."""
    if _S.worker is not None:
        return rank(), size()
    _S.argv = gravac.options_argv(options, config, **kw)
    try:
        _S.worker = gravac.Worker(_S.argv)
    except GravacError as e:
        if "no servers given" in str(e) or "--rank" in str(e):
            e.args = (str(e) + "\n(a gravac job's workers are started by gravac-launch, e.g. "
                      "gravac-launch --servers 2 --workers 2 -- python3 %s; or set GV_SERVERS, "
                      "GV_RANK and GV_NUM_WORKERS: docs/torch.md)"
                      % os.path.basename(sys.argv[0] or "train.py"),)
        raise
    _install_hooks()
    return rank(), size()


def _worker():
    if _S.worker is None:
        raise RuntimeError("gravac.torch: call init() first")
    return _S.worker


def rank():
    """This worker's rank, 0 .. size() - 1."""
    return _worker().rank


def size():
    """The number of workers."""
    return _worker().size


def local_rank():
    """The rank among this host's workers (gravac-launch, Open MPI or Slurm say it; else the
    rank)."""
    for v in ("GV_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        if v in os.environ:
            return int(os.environ[v])
    return rank()


def num_servers():
    return _worker().num_servers


def last_step():
    """What the last step did: iteration, level (dense, floor, candidate), cf, cf_candidate,
    theta_min, bytes_sent, bytes_recv (this worker's, headers included), nnz_sent, compress_s,
    comm_s, step_s (the whole gravac call); None before the first step."""
    return _S.last


def binding_stats():
    """Where the steps' time went: steps, sync_s (in synchronize(): gathering the gradients,
    the libgravac call, its results) and lib_s (inside libgravac's step): sync_s - lib_s is
    what the Python binding adds."""
    return dict(_S.binding)


def report(accuracy=float("nan"), loss=float("nan")):
    """Records a test-set evaluation (accuracy in 0..1) in the metrics file and the summary
    (gravac-launch prints worker 0's). The time since the last step was the evaluation's, not
    training: the next step's compute time, which the servers' controller compares arms by,
    starts now (as the metrics' train_s leaves it out)."""
    _worker().report_eval(loss, accuracy)
    if _S.optimizer is not None:
        _S.optimizer._gv_t_last = time.perf_counter()


def shutdown():
    """Ends this worker's part: BYE to the servers and the summary. Runs at exit by itself."""
    w = _S.worker
    if w is None:
        return
    try:
        if not _S.failed:
            w.finish()
    finally:
        w.close()
        _S.worker = None


def _install_hooks():
    if _S.hooks:
        return
    _S.hooks = True
    previous = sys.excepthook

    def hook(etype, value, tb):
        # the traceback first (it is what the user needs), then the servers are told, so
        # that every process stops and names this worker and the error
        previous(etype, value, tb)
        _S.failed = True
        w = _S.worker
        if w is not None and w.started and not isinstance(value, GravacError):
            where = ""
            while tb is not None:
                where = " (%s line %d)" % (os.path.basename(tb.tb_frame.f_code.co_filename),
                                           tb.tb_lineno)
                tb = tb.tb_next
            w.fail("the training script raised %s: %s%s" % (etype.__name__, value, where))
            # out at once, as the other processes are stopping: no finalisation (PyTorch's
            # takes a while), so that a launcher sees this worker, the cause, exit first
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)

    sys.excepthook = hook
    atexit.register(shutdown)


def _compression_argv(compression):
    if compression is None:
        return []
    if isinstance(compression, str):
        return ["--method=%s" % compression]
    if isinstance(compression, dict):
        return gravac.options_argv(compression)
    raise TypeError("compression: a method name ('gravac-exp', 'static', 'dense', ...) or a dict "
                    "of gravac options ({'method': 'static', 'cf': 100})")


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods DistributedOptimizer adds to a subclass of the wrapped optimizer's class."""

    def __init__(self, params, named_parameters, batch_size, capture_loss):
        super(self.__class__, self).__init__(params)
        self._gv_batch = int(batch_size) if batch_size else 1
        self._gv_synced = False
        self._gv_loss = float("nan")  # set_loss's, for the next step only
        self._gv_capture = bool(capture_loss)
        self._gv_loss_sum, self._gv_loss_n = 0.0, 0  # backward() on scalars since the last step
        self._gv_lr = 0.0  # the learning rate last told to libgravac
        in_groups = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is None:
            named = [("param.%d" % i, p) for i, p in enumerate(in_groups)]
        else:
            named = list(named_parameters)
        seen, order = set(), []
        for name, p in named:
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                order.append((name, p))
        missing = [p for p in in_groups if p.requires_grad and id(p) not in seen]
        if missing:
            raise ValueError("gravac.torch: %d of the optimizer's parameters are not in "
                             "named_parameters" % len(missing))
        self._gv_flatten(order)
        w = _worker()
        for name, p in order:
            w.add_tensor(name, tuple(p.shape))
        w.start(self._gv_flat_p.data_ptr(), self._gv_flat_g.data_ptr(), self._gv_flat_p.numel())
        self._gv_t_last = time.perf_counter()
        _S.optimizer = self

    def _gv_flatten(self, order):
        for name, p in order:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError("gravac.torch: parameter %s is %s on %s; gravac trains float32 "
                                 "parameters on the CPU" % (name, p.dtype, p.device))
        total = sum(p.numel() for _, p in order)
        self._gv_flat_p = torch.empty(total, dtype=torch.float32)
        self._gv_flat_g = torch.zeros(total, dtype=torch.float32)
        self._gv_params, self._gv_views = [], []
        off = 0
        with torch.no_grad():
            for name, p in order:
                n = p.numel()
                self._gv_flat_p[off:off + n].copy_(p.detach().reshape(-1))
                p.data = self._gv_flat_p[off:off + n].view_as(p)
                g = self._gv_flat_g[off:off + n].view_as(p)
                p.grad = g
                self._gv_params.append(p)
                self._gv_views.append(g)
                off += n
        self._gv_ptrs = [g.data_ptr() for g in self._gv_views]

    def _gv_gather(self):
        """The gradients in the flat buffer: autograd accumulates into the views; a .grad that
        was replaced (set to None, or a new tensor) is copied back and the view restored."""
        for p, g, ptr in zip(self._gv_params, self._gv_views, self._gv_ptrs):
            pg = p.grad
            if pg is None:
                g.zero_()
                p.grad = g
            elif pg.data_ptr() != ptr:
                g.copy_(pg)
                p.grad = g

    def set_loss(self, loss):
        """The batch's training loss for the next step, reported to the servers (their
        controller, AUTO, compares arms by how fast it falls). Optional: by default the loss is
        the mean of the scalars backward() was called on since the last step (capture_loss)."""
        self._gv_loss = float(loss)

    def _gv_step_loss(self):
        """This step's loss (NaN when unknown), and the capture restarted."""
        loss = self._gv_loss
        if loss != loss and self._gv_loss_n > 0:
            loss = self._gv_loss_sum / self._gv_loss_n
        self._gv_loss = float("nan")
        self._gv_loss_sum, self._gv_loss_n = 0.0, 0
        return loss

    def synchronize(self):
        """Pushes the gradients and writes the average over the workers into .grad. step()
        calls it; call it before step() to change the averaged gradients (clipping), then
        step() does not push again."""
        if self._gv_synced:
            return
        t = time.perf_counter()
        self._gv_gather()
        w = _worker()
        lr = max((float(g["lr"]) for g in self.param_groups), default=0.0)
        if lr != self._gv_lr:  # the servers' controller follows the optimizer's (scheduler's) lr
            w.set_lr(lr)
            self._gv_lr = lr
        info = w.step(self._gv_step_loss(), t - self._gv_t_last, self._gv_batch)
        _S.binding["steps"] += 1
        _S.binding["sync_s"] += time.perf_counter() - t
        _S.binding["lib_s"] += info.step_s
        _S.last = {"iteration": info.iteration, "level": gravac._lib.LEVELS.get(info.level, "?"),
                   "cf": info.cf, "cf_candidate": info.cf_candidate, "theta_min": info.theta_min,
                   "bytes_sent": info.bytes_sent, "bytes_recv": info.bytes_recv,
                   "nnz_sent": info.nnz_sent, "compress_s": info.compress_s,
                   "comm_s": info.comm_s, "step_s": info.step_s}
        self._gv_synced = True

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            if torch.is_tensor(loss) and loss.numel() == 1 and not self._gv_synced:
                self._gv_loss = float(loss.detach())
        self.synchronize()
        self._gv_synced = False
        super(self.__class__, self).step()
        self._gv_t_last = time.perf_counter()
        return loss

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place (the flat buffer; set_to_none would unlink the
        views, so it is ignored)."""
        self._gv_flat_g.zero_()
        for p, g in zip(self._gv_params, self._gv_views):
            if p.grad is not g:
                p.grad = g

    @property
    def flat_parameters(self):
        """The parameters as one float32 vector (views of it are the model's parameters)."""
        return self._gv_flat_p

    @property
    def flat_gradients(self):
        return self._gv_flat_g


def _install_loss_capture():
    """Wraps torch.Tensor.backward once: a backward() on a scalar with no explicit gradient (the
    loss) records its value for the DistributedOptimizer's next step. What the wrapper adds is a
    comparison and, for such a scalar, one float() of it."""
    if getattr(torch.Tensor.backward, "_gravac_capture", False):
        return
    backward = torch.Tensor.backward

    def capture(self, gradient=None, *args, **kwargs):
        o = _S.optimizer
        if o is not None and o._gv_capture and gradient is None and self.numel() == 1:
            v = float(self.detach())
            o._gv_loss_sum += v
            o._gv_loss_n += 1
        return backward(self, gradient, *args, **kwargs)

    capture.__doc__ = backward.__doc__
    capture.__wrapped__ = backward
    capture._gravac_capture = True
    torch.Tensor.backward = capture


def DistributedOptimizer(optimizer, named_parameters=None, compression=None, batch_size=None,
                         capture_loss=True):
    """Wraps any torch.optim optimizer (SGD, Adam, AdamW, ...): step() pushes the gradients to
    gravac's servers and writes the average over the workers into .grad before the optimizer's
    own step. named_parameters: model.named_parameters() (the names the servers see and report;
    every worker must pass the same model). compression: None (the job's options: gravac-launch,
    GV_*, a config file), a method name ('gravac-exp', 'gravac-geo', 'static', 'dense'), or a
    dict of gravac options ({'method': 'static', 'cf': 100}); the servers must run the same
    (a mismatch is refused when connecting). batch_size: samples per step and worker (the
    controller's throughput and the summary's samples/s). capture_loss: report each step's
    training loss to the servers, taken from backward() on a scalar (the mean when there are
    several, as with gradient accumulation); the default controller, AUTO, compares its arms by
    how fast that loss falls, and without it only by time. set_loss() gives the loss instead.
    Connects to the servers: every worker must construct it."""
    w = _worker()
    if w.started:
        raise RuntimeError("gravac.torch: one DistributedOptimizer per process")
    extra = _compression_argv(compression)
    if extra:
        w.close()
        _S.worker = gravac.Worker(_S.argv + extra)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    dist = cls(optimizer.param_groups, named_parameters, batch_size, capture_loss)
    if capture_loss:
        _install_loss_capture()
    if optimizer.state:
        dist.load_state_dict(optimizer.state_dict())
    return dist


def broadcast_parameters(params, root_rank=0):
    """Horovod's call. The parameters the DistributedOptimizer holds were broadcast from worker
    0 when it connected (through the servers, which worker 0 seeds), and the servers check at
    every step that they stay equal: this checks that root_rank is 0 and that the optimizer
    exists. Buffers (BatchNorm's running statistics) are not communicated: each worker keeps
    its own, as with Horovod after its first broadcast (evaluate on worker 0)."""
    if root_rank != 0:
        raise ValueError("gravac.torch: every replica starts from worker 0's parameters "
                         "(root_rank must be 0)")
    if _S.optimizer is None:
        raise RuntimeError("gravac.torch: construct the DistributedOptimizer first: it "
                           "connects and receives worker 0's parameters")


def broadcast_optimizer_state(optimizer, root_rank=0):
    """Horovod's call: the DistributedOptimizer starts with a fresh state on every worker
    (or the wrapped optimizer's, when it had one: load the same checkpoint everywhere)."""
    if root_rank != 0:
        raise ValueError("gravac.torch: root_rank must be 0")
