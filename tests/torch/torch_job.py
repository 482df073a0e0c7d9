#!/usr/bin/python3
"""A worker of the PyTorch tests (test_torch.py starts it with gravac-launch), or with --mode
reference the single-process run the dense mode must equal. A small MLP on synthetic data:
global batch g of 2b rows per step, worker w trains on rows [w*b, (w+1)*b) of it, so the
average of the workers' gradients is the global batch's gradient. Each worker starts from its
own random model (seed 100 + rank): gravac must start them all from worker 0's.

Modes: train (the parameters go to OUT/params-RANK.bin, each step's training loss to
OUT/losses-RANK.txt; --loss says how gravac learns it: captured from backward(), set_loss() with
twice the loss, or not at all; --accumulate runs backward() on two halves of the batch), mismatch (worker 1's model is wider),
error (worker 1 divides by zero at step 3), diverge (worker 1 changes a parameter behind the
optimizer's back after step 2), reference (no gravac: one process, the global batches).
"""

import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(20, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def data(steps, batch):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(steps, batch, 20, generator=g)
    w = torch.randn(20, 10, generator=g)
    return x, (x @ w).argmax(-1)


def optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=0.01)
    return torch.optim.AdamW(params, lr=0.01, weight_decay=0.05)


def divide(a, b):
    return a / b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="train")
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="per worker")
    ap.add_argument("--out", required=True)
    ap.add_argument("--loss", default="capture", choices=["capture", "set", "none"])
    ap.add_argument("--accumulate", action="store_true")
    ap.add_argument("--eval-at", type=int, default=-1,
                    help="after this step, worker 0 pauses 0.5 s (an evaluation) and reports")
    ap.add_argument("--lr-drop-at", type=int, default=0,
                    help="a StepLR scheduler multiplies the lr by 0.1 every this many steps")
    args = ap.parse_args()
    torch.set_num_threads(1)
    world, rank = 2, 0
    if args.mode != "reference":
        import gravac.torch as gv
        gv.init()
        rank, world = gv.rank(), gv.size()
    torch.manual_seed(100 + rank)
    model = Net(33 if args.mode == "mismatch" and rank == 1 else 32)
    opt = optimizer(args.optimizer, model.parameters())
    if args.mode != "reference":
        opt = gv.DistributedOptimizer(opt, model.named_parameters(), batch_size=args.batch,
                                      capture_loss=args.loss != "none")
        gv.broadcast_parameters(model.state_dict(), root_rank=0)
    if args.mode == "reference":
        torch.manual_seed(100)  # worker 0's model
        model = Net()
        opt = optimizer(args.optimizer, model.parameters())
    x, y = data(args.steps, world * args.batch)
    lo, hi = (0, world * args.batch) if args.mode == "reference" else \
        (rank * args.batch, (rank + 1) * args.batch)
    sched = torch.optim.lr_scheduler.StepLR(opt, args.lr_drop_at, 0.1) if args.lr_drop_at else None
    losses = []
    for step in range(args.steps):
        opt.zero_grad()
        if args.accumulate:  # two halves, each loss halved: the same gradient as one batch
            mid = (lo + hi) // 2
            parts = [0.5 * F.cross_entropy(model(x[step, a:b]), y[step, a:b])
                     for a, b in ((lo, mid), (mid, hi))]
            for part in parts:
                part.backward()
            losses.append(sum(float(part) for part in parts) / 2)
            loss = parts[1]
        else:
            loss = F.cross_entropy(model(x[step, lo:hi]), y[step, lo:hi])
            loss.backward()
            losses.append(float(loss))
        if args.mode != "reference" and args.loss == "set":
            opt.set_loss(2 * losses[-1])
        if args.mode == "error" and rank == 1 and step == 3:
            divide(loss.item(), 0)
        opt.step()
        if sched is not None:
            sched.step()
        if step == args.eval_at and args.mode != "reference" and rank == 0:
            time.sleep(0.5)  # what an evaluation of the test set takes
            gv.report(accuracy=0.5, loss=1.0)
        if args.mode == "diverge" and rank == 1 and step == 2:
            with torch.no_grad():
                model.fc2.bias[0] += 1e-3
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    name = "reference" if args.mode == "reference" else "params-%d" % rank
    with open(os.path.join(args.out, name + ".bin"), "wb") as f:
        f.write(flat.numpy().tobytes())
    if args.mode == "train":
        with open(os.path.join(args.out, "losses-%d.txt" % rank), "w") as f:
            f.write("".join("%r\n" % v for v in losses))
    if args.mode != "reference" and rank == 0:
        last = gv.last_step()
        print("torch_job: worker 0 done: %d steps, last CF %g, sent %d bytes"
              % (args.steps, last["cf"], last["bytes_sent"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
