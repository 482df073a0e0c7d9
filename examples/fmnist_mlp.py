#!/usr/bin/python3
"""The MLP 784-256-128-10 (nn/'s, now in PyTorch) on Fashion-MNIST, trained through gravac.

    gravac-launch --servers 2 --workers 2 -- python3 examples/fmnist_mlp.py --epochs 2

The five lines marked "# gravac" are all that differ from the single-process script (two more,
marked optional, show gravac's CF and bytes and give the job's summary the accuracy).
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import datasets
import gravac.torch as gv  # gravac


class MLP(nn.Module):
    def __init__(self, widths=(256, 128)):
        super().__init__()
        dims = [784] + list(widths) + [10]
        self.fc = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.fc[:-1]:
            x = F.relu(layer(x))
        return self.fc[-1](x)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--batch", type=int, default=64, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--progress-every", type=int, default=100)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    args = ap.parse_args()

    gv.init()  # gravac
    rank, world = gv.rank(), gv.size()  # gravac (single process: 0, 1)
    torch.manual_seed(args.seed)
    x, y = datasets.fashion_mnist("train")
    xt, yt = datasets.fashion_mnist("test")
    mine = datasets.shard(len(x), rank, world, args.seed)

    model = MLP()
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    opt = gv.DistributedOptimizer(opt, model.named_parameters(), batch_size=args.batch)  # gravac
    gv.broadcast_parameters(model.state_dict(), root_rank=0)  # gravac

    lead = rank == 0
    per_epoch = len(mine) // args.batch
    total = args.steps or int(args.epochs * per_epoch)
    if lead:
        print("fmnist_mlp: %d workers, %d parameters, %s, %d steps of %d per worker (%d per "
              "epoch)" % (world, sum(p.numel() for p in model.parameters()), args.optimizer,
                          total, args.batch, per_epoch), flush=True)
    prog = datasets.Progress(args.progress_every, args.batch, world, on=lead)
    step, epoch, t0, best = 0, 0, time.perf_counter(), 0.0
    while step < total:
        for idx in datasets.batches(mine, args.batch, epoch, args.seed):
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            prog.add(step, epoch, loss.item(), (out.argmax(1) == y[idx]).sum().item(),
                     len(idx), gv.last_step())  # gravac, optional: CF and bytes
            if step == total:
                break
        epoch += 1
        if lead:
            tl, acc = datasets.evaluate(model, xt, yt)
            best = max(best, acc)
            gv.report(accuracy=acc, loss=tl)  # gravac, optional: for the job's summary
            print("eval  step %6d epoch %2d  test loss %.4f  accuracy %.2f%%"
                  % (step, epoch, tl, 100 * acc), flush=True)
    if lead:
        secs = time.perf_counter() - t0
        b = gv.binding_stats()  # gravac, optional: what the binding costs
        print("fmnist_mlp summary: %d steps in %.1f s (%.2f ms per step), final test accuracy "
              "%.2f%% (best %.2f%%); binding: %.3f ms per step in synchronize(), %.3f ms of it "
              "in libgravac" % (step, secs, 1e3 * secs / max(step, 1), 100 * acc, 100 * best,
                                1e3 * b["sync_s"] / max(b["steps"], 1),
                                1e3 * b["lib_s"] / max(b["steps"], 1)), flush=True)


if __name__ == "__main__":
    main()
