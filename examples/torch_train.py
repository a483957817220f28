#!/usr/bin/python3
"""Data-parallel training of a small PyTorch CNN on scikit-learn's digits, with hvd.torch.

    hvdrun -np 4 /usr/bin/python3 examples/torch_train.py      (PYTHONPATH=build/python)

The data set is scikit-learn's digits (1797 8x8 grey-scale images of the digits 0-9), which
ships inside the python3-sklearn package: nothing is downloaded. A fixed permutation splits it
into 1497 training and 300 test images, the same on every rank; each rank trains on its own
shard of the training images (torch's DistributedSampler) and evaluates its shard of the test
images.

What makes it data-parallel is Horovod's API only, so the same file runs under real Horovod
(horovodrun; it imports horovod.torch where hvd.torch is absent) and through hvd's compat package
(--module horovod.torch with PYTHONPATH=build/python:build/python_compat):
  - hvd.init(); every rank initialises its model from a different seed, then
    hvd.broadcast_parameters and hvd.broadcast_optimizer_state make them start from rank 0's;
  - hvd.DistributedOptimizer(opt, named_parameters=...) averages every gradient across the
    ranks during backward (one allreduce per parameter, fused by hvd) before each step; the
    learning rate is scaled by hvd.size(), as Horovod recommends;
  - per epoch, one hvd.allreduce (op=hvd.Sum) of [loss sum, samples, correct, test samples] gives
    the loss and test accuracy over all ranks' shards, which rank 0 prints;
  - at the end every rank hashes its parameters and hvd.allgather_object compares the hashes:
    the job exits non-zero unless every rank ends with bit-identical parameters (or when the
    final test accuracy is below --min-accuracy).

Options: --epochs N (10) --batch-size B per rank (32) --lr LR per rank (0.02) --momentum M (0.9)
--seed S (42) --min-accuracy A (0.9) --module hvd.torch|horovod.torch (default: hvd.torch, else
horovod.torch). Each rank uses one intra-op thread (ranks share the host's cores).
"""
import argparse
import hashlib
import importlib
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the job's size")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--min-accuracy", type=float, default=0.9,
                   help="exit non-zero when the final test accuracy is below this")
    p.add_argument("--module", default=None,
                   help="the Horovod-API module to use (default: hvd.torch, else horovod.torch)")
    return p.parse_args()


def import_hvd(name):
    if name:
        return importlib.import_module(name)
    try:
        return importlib.import_module("hvd.torch")
    except ImportError as hvd_error:
        try:
            return importlib.import_module("horovod.torch")
        except ImportError:
            # Say what to set, not that the fallback is missing too.
            raise ImportError("cannot import hvd.torch (%s): put hvd's build/python on PYTHONPATH, "
                              "e.g. PYTHONPATH=build/python build/cli/hvdrun -np 4 /usr/bin/python3 "
                              "examples/torch_train.py" % hvd_error) from None


class Net(nn.Module):
    """Two 3x3 convolutions, a 2x2 max-pool and two fully connected layers (38k parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def load_data(seed):
    """The digits as (train images, train labels, test images, test labels), identical on every
    rank: shape (N, 1, 8, 8), standardised with the training images' mean and deviation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target, dtype=torch.int64)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    x, y = x[perm], y[perm]
    n_test = 300
    mean, std = x[n_test:].mean(), x[n_test:].std()
    x = (x - mean) / std
    return x[n_test:], y[n_test:], x[:n_test], y[:n_test]


def params_digest(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    hvd = import_hvd(args.module)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    log = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)

    x_train, y_train, x_test, y_test = load_data(args.seed)
    train_set = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(train_set, num_replicas=size, rank=rank, shuffle=True,
                                 seed=args.seed)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    n_test = len(y_test)
    x_test, y_test = x_test[rank::size], y_test[rank::size]  # this rank's test shard

    # A different initialisation on every rank: the broadcast below is what makes them agree.
    torch.manual_seed(args.seed + rank)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    log(f"torch_train: {hvd.__name__} {size} ranks, {len(train_set)} training images "
        f"({len(sampler)} per rank, batch {args.batch_size} per rank), {n_test} test "
        f"images, {sum(p.numel() for p in model.parameters())} parameters")
    start = time.perf_counter()
    accuracy = 0.0
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        sampler.set_epoch(epoch)
        loss_sum, seen = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(yb)
            seen += len(yb)

        model.eval()
        with torch.no_grad():
            correct = (model(x_test).argmax(1) == y_test).sum().item()
        # Over every rank's shard: sums, then ratios.
        totals = hvd.allreduce(torch.tensor([loss_sum, seen, correct, len(y_test)],
                                            dtype=torch.float64), name="metrics", op=hvd.Sum)
        loss_all, seen_all, correct_all, tested_all = totals.tolist()
        accuracy = correct_all / tested_all
        log(f"epoch {epoch:2d}  loss {loss_all / seen_all:.4f}  test accuracy {accuracy:6.2%}  "
            f"({time.perf_counter() - t0:.2f} s)")

    # Every rank must end with the same parameters, bit for bit.
    digests = hvd.allgather_object(params_digest(model))
    differing = [r for r, d in enumerate(digests) if d != digests[0]]
    elapsed = time.perf_counter() - start
    status = 0
    if differing:
        log(f"torch_train: FAILED: parameters differ from rank 0's on ranks {differing}")
        status = 1
    else:
        log(f"torch_train: parameters bit-identical on all {size} ranks "
            f"(sha256 {digests[0][:16]}...)")
    if accuracy < args.min_accuracy:
        log(f"torch_train: FAILED: test accuracy {accuracy:.2%} is below {args.min_accuracy:.2%}")
        status = 1
    log(f"torch_train: {args.epochs} epochs in {elapsed:.2f} s, final test accuracy {accuracy:.2%}")
    hvd.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
