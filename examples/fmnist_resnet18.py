#!/usr/bin/python3
"""torchvision's ResNet-18 adapted to 1x28x28 Fashion-MNIST, trained through gravac.

    gravac-launch --servers 2 --workers 2 -- python3 examples/fmnist_resnet18.py --epochs 1

The adaptation: one input channel and a 3x3 stride-1 first convolution (the 7x7 stride-2 one
is made for 224x224 images), the max-pooling kept, so the four stages run at 14, 7, 4 and 2
pixels; 11.2 M parameters in 62 tensors. The five lines marked "# gravac" are all that differ
from the single-process script.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import datasets
import gravac.torch as gv  # gravac


def resnet18_28x28(stem="small"):
    """stem small: a 3x3 stride-1 first convolution (the stages at 14, 7, 4, 2 pixels);
    torchvision: its own 7x7 stride-2 one with one input channel (7, 4, 2, 1 pixels: a quarter
    of the computation, for the shaped-network benchmark on two cores)."""
    model = torchvision.models.resnet18(num_classes=10)
    if stem == "small":
        model.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    else:
        model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=1)
    ap.add_argument("--batch", type=int, default=32, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--progress-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=0, help="steps (0: each epoch)")
    ap.add_argument("--eval-limit", type=int, default=2000, help="test images per evaluation")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    ap.add_argument("--target", type=float, default=0, help="stop at this test accuracy (0..1)")
    ap.add_argument("--stem", default="small", choices=["small", "torchvision"])
    args = ap.parse_args()

    gv.init()  # gravac
    rank, world = gv.rank(), gv.size()  # gravac (single process: 0, 1)
    torch.manual_seed(args.seed)
    x, y = datasets.fashion_mnist("train")
    xt, yt = datasets.fashion_mnist("test")
    xt, yt = xt[:args.eval_limit], yt[:args.eval_limit]
    x, xt = (x - 0.286) / 0.353, (xt - 0.286) / 0.353  # the training set's mean and deviation
    mine = datasets.shard(len(x), rank, world, args.seed)

    model = resnet18_28x28(args.stem)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    elif args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    opt = gv.DistributedOptimizer(opt, model.named_parameters(), batch_size=args.batch)  # gravac
    gv.broadcast_parameters(model.state_dict(), root_rank=0)  # gravac

    lead = rank == 0
    per_epoch = len(mine) // args.batch
    total = args.steps or int(args.epochs * per_epoch)
    if lead:
        print("fmnist_resnet18: %d workers, %d parameters in %d tensors, %s, %d steps of %d per "
              "worker (%d per epoch), %d threads" % (
                  world, sum(p.numel() for p in model.parameters()),
                  len(list(model.parameters())), args.optimizer, total, args.batch, per_epoch,
                  torch.get_num_threads()), flush=True)
    prog = datasets.Progress(args.progress_every, args.batch, world, on=lead)
    step, epoch, t0, best, acc, done = 0, 0, time.perf_counter(), 0.0, 0.0, False
    try:
        while not done:
            for idx in datasets.batches(mine, args.batch, epoch, args.seed):
                out = model(x[idx])
                loss = F.cross_entropy(out, y[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                prog.add(step, epoch, loss.item(), (out.argmax(1) == y[idx]).sum().item(),
                         len(idx), gv.last_step())  # gravac, optional: CF and bytes
                end_epoch = step % per_epoch == 0
                due = args.eval_every and step % args.eval_every == 0
                if lead and (due or end_epoch or step == total):
                    tl, acc = datasets.evaluate(model, xt, yt, batch=500)
                    best = max(best, acc)
                    gv.report(accuracy=acc, loss=tl)  # gravac, optional: for the job's summary
                    print("eval  step %6d epoch %2d  test loss %.4f  accuracy %.2f%%  (%.0f s)"
                          % (step, epoch, tl, 100 * acc, time.perf_counter() - t0), flush=True)
                if step == total or (args.target and acc >= args.target):
                    done = True
                    break
            epoch += 1
    except gv.JobEnded:  # gravac, optional: worker 0 reached --target and ended the job
        pass
    if lead:
        secs = time.perf_counter() - t0
        print("fmnist_resnet18 summary: %d steps in %.1f s (%.0f ms per step), final test "
              "accuracy %.2f%% (best %.2f%%) on %d test images"
              % (step, secs, 1e3 * secs / max(step, 1), 100 * acc, 100 * best, len(xt)),
              flush=True)


if __name__ == "__main__":
    main()
