#!/usr/bin/python3
"""A character-level LSTM language model on the fortunes corpus, trained through gravac.

    gravac-launch --servers 2 --workers 2 -- python3 examples/fortunes_lstm.py --epochs 2

The corpus, its byte vocabulary and its train/test cut are those of gravac's own LSTM (nn/):
six files of the Debian package fortunes, the last 10 % of each for testing; a sample is a
window of 64 characters and the model predicts each next one (truncated back-propagation
through the window). The five lines marked "# gravac" are all that differ from the
single-process script.
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import datasets
import gravac.torch as gv  # gravac


class CharLSTM(nn.Module):
    def __init__(self, vocab, embed=64, hidden=256, layers=1):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.embed(x))
        return self.out(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--batch", type=int, default=32, help="windows per worker")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--embed", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--optimizer", default="adam", choices=["sgd", "adam", "adamw"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--progress-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=0, help="steps (0: each epoch)")
    ap.add_argument("--eval-limit", type=int, default=0, help="test windows (0: all)")
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: epochs)")
    ap.add_argument("--target", type=float, default=0, help="stop at this next-char accuracy")
    args = ap.parse_args()

    gv.init()  # gravac
    rank, world = gv.rank(), gv.size()  # gravac (single process: 0, 1)
    torch.manual_seed(args.seed)
    train, test, vocab = datasets.fortunes(args.seq_len)
    if args.eval_limit:
        test = test[:args.eval_limit]
    mine = datasets.shard(len(train), rank, world, args.seed)

    model = CharLSTM(vocab, args.embed, args.hidden, args.layers)
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
        print("fortunes_lstm: %d workers, vocabulary %d, %d parameters, %d train windows of %d, "
              "%d test, %s, %d steps of %d per worker (%d per epoch)" % (
                  world, vocab, sum(p.numel() for p in model.parameters()), len(train),
                  args.seq_len, len(test), args.optimizer, total, args.batch, per_epoch),
              flush=True)
    prog = datasets.Progress(args.progress_every, args.batch, world, on=lead)
    step, epoch, t0, best, acc, done = 0, 0, time.perf_counter(), 0.0, 0.0, False
    try:
        while not done:
            for idx in datasets.batches(mine, args.batch, epoch, args.seed):
                w = train[idx]
                out = model(w[:, :-1])
                loss = F.cross_entropy(out.reshape(-1, vocab), w[:, 1:].reshape(-1))
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # on each worker's own gradient
                opt.step()
                step += 1
                correct = (out.argmax(-1) == w[:, 1:]).sum().item()
                prog.add(step, epoch, loss.item(), correct, w[:, 1:].numel(),
                         gv.last_step())  # gravac, optional: CF and bytes
                end_epoch = step % per_epoch == 0
                due = args.eval_every and step % args.eval_every == 0
                if lead and (due or end_epoch or step == total):
                    tl, acc = datasets.evaluate(model, test, None, batch=256, seq=True)
                    best = max(best, acc)
                    gv.report(accuracy=acc, loss=tl)  # gravac, optional: for the job's summary
                    print("eval  step %6d epoch %2d  test loss %.4f  perplexity %.2f  next-char "
                          "accuracy %.2f%%  (%.0f s)" % (step, epoch, tl, math.exp(tl), 100 * acc,
                                                         time.perf_counter() - t0), flush=True)
                if step == total or (args.target and acc >= args.target):
                    done = True
                    break
            epoch += 1
    except gv.JobEnded:  # gravac, optional: worker 0 reached --target and ended the job
        pass
    if lead:
        secs = time.perf_counter() - t0
        print("fortunes_lstm summary: %d steps in %.1f s (%.1f ms per step), final test "
              "next-char accuracy %.2f%% (best %.2f%%)"
              % (step, secs, 1e3 * secs / max(step, 1), 100 * acc, 100 * best), flush=True)


if __name__ == "__main__":
    main()
