"""Data and small helpers the examples share (nothing gravac-specific here).

Fashion-MNIST from the Debian package dataset-fashion-mnist (IDX files under
/usr/share/datasets/fashion-mnist), and a character corpus from the fortunes package: the same
files, byte vocabulary and train/test cut (the last 10 % of each file) as gravac's own LSTM
(nn/, docs/training.md).
"""

import gzip
import os
import time

import numpy as np
import torch

FASHION_DIR = "/usr/share/datasets/fashion-mnist"
FORTUNES = ["cookie", "computers", "songs-poems", "definitions", "people", "science"]
FORTUNES_DIR = "/usr/share/games/fortunes"


def _idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist(split, data_dir=FASHION_DIR):
    """(images float32 [N, 1, 28, 28] in 0..1, labels int64 [N]) of 'train' or 'test'."""
    pre = "train" if split == "train" else "t10k"
    x = _idx(os.path.join(data_dir, pre + "-images-idx3-ubyte.gz"))
    y = _idx(os.path.join(data_dir, pre + "-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(y.astype(np.int64))


def fortunes(seq_len, test_frac=0.1, files=FORTUNES, data_dir=FORTUNES_DIR):
    """Windows of seq_len + 1 characters (input = the first seq_len, target = shifted by one):
    (train int64 [N, seq_len + 1], test [M, seq_len + 1], vocabulary size)."""
    texts = []
    for name in files:
        with open(os.path.join(data_dir, name), "rb") as f:
            texts.append(f.read())
    seen = sorted(set(b"".join(texts)))
    ids = np.full(256, -1, dtype=np.int64)
    ids[seen] = np.arange(len(seen))
    train, test = [], []
    for t in texts:
        cut = len(t) - int(len(t) * test_frac)
        arr = ids[np.frombuffer(t, dtype=np.uint8)]
        train.append(arr[:cut])
        test.append(arr[cut:])

    def windows(parts):
        s = np.concatenate(parts)
        n = (len(s) - 1) // seq_len
        idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
        return torch.from_numpy(s[idx])

    return windows(train), windows(test), len(seen)


def shard(n, rank, world, seed):
    """This worker's fixed shard of n samples: a seeded permutation cut into world parts."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    return perm[rank::world]


def batches(index, batch, epoch, seed):
    """The shard's samples in a new order every epoch, in full batches."""
    g = torch.Generator().manual_seed(seed * 1000003 + epoch)
    order = index[torch.randperm(len(index), generator=g)]
    for i in range(0, len(order) - batch + 1, batch):
        yield order[i:i + batch]


class Progress:
    """One line every `every` steps: loss, accuracy, samples/s, and gravac's CF and bytes."""

    def __init__(self, every, batch, world, on=True):
        self.every, self.batch, self.world, self.on = every, batch, world, on
        self.t0 = self.t = time.perf_counter()
        self.loss = self.correct = self.count = 0.0
        self.sent = self.recv = self.steps = 0

    def add(self, step, epoch, loss, correct, count, last=None):
        self.loss += loss * count
        self.correct += correct
        self.count += count
        self.steps += 1
        if last is not None:
            self.sent += last["bytes_sent"]
            self.recv += last["bytes_recv"]
        if not self.on or step % self.every != 0:
            return
        now = time.perf_counter()
        line = ("step %6d epoch %2d  loss %.4f acc %6.2f%%  %7.0f samples/s"
                % (step, epoch, self.loss / self.count, 100.0 * self.correct / self.count,
                   self.steps * self.batch * self.world / (now - self.t)))
        if last is not None:
            line += "  CF %g  sent %s  recv %s" % (last["cf"], kib(self.sent / self.steps),
                                                  kib(self.recv / self.steps))
        print(line, flush=True)
        self.t = now
        self.loss = self.correct = self.count = 0.0
        self.sent = self.recv = self.steps = 0


def kib(b):
    return "%.1f KiB" % (b / 1024.0) if b < 1 << 20 else "%.2f MiB" % (b / 1048576.0)


@torch.no_grad()
def evaluate(model, x, y, batch=1000, seq=False):
    """(mean loss, accuracy) over (x, y); seq: x holds windows, the targets are shifted."""
    model.eval()
    loss, correct, count = 0.0, 0, 0
    for i in range(0, len(x), batch):
        if seq:
            w = x[i:i + batch]
            out = model(w[:, :-1])
            tgt = w[:, 1:]
            out = out.reshape(-1, out.shape[-1])
            tgt = tgt.reshape(-1)
        else:
            out = model(x[i:i + batch])
            tgt = y[i:i + batch]
        loss += torch.nn.functional.cross_entropy(out, tgt, reduction="sum").item()
        correct += (out.argmax(1) == tgt).sum().item()
        count += tgt.numel()
    model.train()
    return loss / count, correct / count
