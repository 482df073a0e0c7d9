#!/usr/bin/python3
"""torch_ddp_train.py: the PyTorch DDP baselines of bench_torch.py ddp, over gloo: the same
models, data shards, optimizers, evaluations and metrics records as the gravac examples
(examples/fmnist_resnet18.py, examples/fortunes_lstm.py), with
  dense     DistributedDataParallel, plain allreduce
  fp16      DistributedDataParallel with the fp16_compress_hook
  powersgd  PowerSGD (rank r, error feedback, warm start) with blocking allreduces in a fixed
            order: the P factors of every matrix in one flat allreduce, then the Q factors, and
            the vectors and small tensors dense in one more (Debian's torch 1.13 aborts inside
            gloo with DDP's own PowerSGD hook when the model has more than one bucket)
Rank, world size and the rendezvous come from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
Worker 0 evaluates every --eval-every steps and writes JSON lines ("eval": step, train_s with
the evaluations left out, accuracy; "iter": step and train_s) to --metrics-file; at --target it
tells the others (a broadcast at each evaluation) and every worker stops.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
import datasets  # noqa: E402


class PowerSGD:
    """Vogels et al.'s rank-r compression with error feedback and warm start."""

    def __init__(self, params, rank, world, start, min_ratio=2.0):
        self.world, self.start, self.step = world, start, 0
        self.mats, self.dense, self.err, self.q = [], [], {}, {}
        g = torch.Generator().manual_seed(17)
        for p in params:
            n, m = p.shape[0], p.numel() // max(p.shape[0], 1)
            if p.dim() >= 2 and (n * m) / ((n + m) * rank) >= min_ratio:
                self.mats.append(p)
                self.q[p] = torch.randn(m, rank, generator=g)
                self.err[p] = torch.zeros(n, m)
            else:
                self.dense.append(p)

    def _allreduce_flat(self, tensors):
        flat = torch.cat([t.reshape(-1) for t in tensors])
        dist.all_reduce(flat)
        out, off = [], 0
        for t in tensors:
            out.append(flat[off:off + t.numel()].view_as(t))
            off += t.numel()
        return out

    def reduce(self):
        """The gradients averaged (approximately, for the matrices once started)."""
        self.step += 1
        everything = self.dense + self.mats
        if self.step <= self.start:
            for p, g in zip(everything, self._allreduce_flat([p.grad for p in everything])):
                p.grad.copy_(g / self.world)
            return
        if self.dense:
            for p, g in zip(self.dense, self._allreduce_flat([p.grad for p in self.dense])):
                p.grad.copy_(g / self.world)
        ms = [p.grad.reshape(p.shape[0], -1) + self.err[p] for p in self.mats]
        ps = self._allreduce_flat([m @ self.q[p] for m, p in zip(ms, self.mats)])
        ps = [torch.linalg.qr(x)[0] for x in ps]
        qs = self._allreduce_flat([m.t() @ x for m, x in zip(ms, ps)])
        for p, m, x, q in zip(self.mats, ms, ps, qs):
            self.q[p] = q / self.world  # warm start: the next step's Q
            approx = x @ (q / self.world).t()
            self.err[p] = m - approx
            p.grad.copy_(approx.view_as(p.grad))


def build(args, rank, world):
    if args.model == "resnet18":
        import fmnist_resnet18 as ex
        x, y = datasets.fashion_mnist("train")
        xt, yt = datasets.fashion_mnist("test")
        x, xt = (x - 0.286) / 0.353, (xt - 0.286) / 0.353
        xt, yt = xt[:args.eval_limit], yt[:args.eval_limit]
        model = ex.resnet18_28x28(args.stem)
        data = (x, y, xt, yt, False)
    else:
        import fortunes_lstm as ex
        train, test, vocab = datasets.fortunes(args.seq_len)
        if args.eval_limit:
            test = test[:args.eval_limit]
        model = ex.CharLSTM(vocab, args.embed, args.hidden, args.layers)
        data = (train, None, test, None, True)
    return model, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["resnet18", "lstm"], required=True)
    ap.add_argument("--hook", choices=["dense", "fp16", "powersgd"], default="dense")
    ap.add_argument("--rank-r", type=int, default=2, help="PowerSGD's rank")
    ap.add_argument("--powersgd-start", type=int, default=10, help="dense steps before it")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--eval-limit", type=int, default=1000)
    ap.add_argument("--target", type=float, default=0)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--metrics-file", default="")
    ap.add_argument("--stem", default="small", choices=["small", "torchvision"])
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)  # the same initial model everywhere, as DDP expects
    model, (x, y, xt, yt, seq) = build(args, rank, world)
    params = [p for p in model.parameters() if p.requires_grad]
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=5e-4)
    else:
        opt = torch.optim.Adam(params, lr=args.lr)
    psgd = None
    if args.hook == "powersgd":
        psgd = PowerSGD(params, args.rank_r, world, args.powersgd_start)
        net = model
    else:
        net = torch.nn.parallel.DistributedDataParallel(model)
        if args.hook == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    mine = datasets.shard(len(x), rank, world, args.seed)
    mf = open(args.metrics_file, "w") if rank == 0 and args.metrics_file else None

    def record(obj):
        if mf:
            mf.write(json.dumps(obj) + "\n")
            mf.flush()

    t0, eval_s, step, epoch, done = time.perf_counter(), 0.0, 0, 0, False
    flag = torch.zeros(1)
    while not done:
        for idx in datasets.batches(mine, args.batch, epoch, args.seed):
            opt.zero_grad()
            if seq:
                w = x[idx]
                out = net(w[:, :-1])
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), w[:, 1:].reshape(-1))
            else:
                loss = F.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            if psgd is not None:
                psgd.reduce()
            if seq:
                torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            record({"type": "iter", "iter": step - 1,
                    "train_s": time.perf_counter() - t0 - eval_s, "loss": loss.item()})
            if step % args.eval_every == 0 or step == args.steps:
                if rank == 0:
                    e0 = time.perf_counter()
                    tl, acc = datasets.evaluate(model, xt, yt, batch=500, seq=seq)
                    train_s = e0 - t0 - eval_s
                    eval_s += time.perf_counter() - e0
                    record({"type": "eval", "step": step, "train_s": train_s, "loss": tl,
                            "accuracy": acc})
                    print("eval step %d train_s %.1f accuracy %.4f" % (step, train_s, acc),
                          flush=True)
                    flag[0] = 1.0 if args.target and acc >= args.target else 0.0
                dist.broadcast(flag, 0)
                done = flag.item() > 0 or step >= args.steps
            if done:
                break
        epoch += 1
    record({"type": "summary", "iterations": step, "train_s": time.perf_counter() - t0 - eval_s})
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
