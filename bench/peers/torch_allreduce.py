#!/usr/bin/python3
"""torch_allreduce: torch.distributed.all_reduce with the gloo backend (PyTorch's CPU path), or
hvd.torch.allreduce (--backend hvd), timed and checked the way hvd's allreduce loop does it
(bench/allreduce_loop.h), for bench/peers/compare.py. Runs under /usr/bin/python3 (Debian's
python3-torch); --backend hvd needs hvd's Python package on PYTHONPATH (build/python).

    torch_allreduce.py -np 2 [--sizes 4K,1M] [--results 1]      spawns its ranks (file:// store)
    torch_allreduce.py -np 2 --backend hvd ...                  the same through hvd.torch
    torchrun --nproc_per_node 2 torch_allreduce.py --hello 1      launch test: one allreduce

--backend hvd times what a user's `out = hvd.allreduce(t, op=hvd.Sum, name=...)` costs: out of
place, a new result tensor per call (dropped at once, as torch_step_bench.py's loop does), named
as a training loop's tensors are (an unnamed call gets a new name every time, so Horovod's
response cache never serves it); allreduce_bench --api 1 --out-of-place 1 is the same operation
from C++.

Same method as the C++ loop: per size, warmup (5, but at most 64 MiB of warmup traffic and at
least 1), a probe loop of n ops grown x4 until it lasts 0.03 s, then ceil(0.3 s x n / probe time)
timed ops (at most 1000); the
slowest rank's time (a MAX allreduce); then the buffer is refilled with the same pattern
((i*7 + r*3 + 1) % 8, exact in float32) and every element checked. Prints the same RESULT lines.
"""
import argparse
import math
import os
import sys
import tempfile
import time

TARGET_S = 0.3
MAX_ITERS = 1000


def parse_bytes(s):
    """'4K' -> 4096, rounded down to whole float32 elements as every program reports sizes;
    ValueError below one element. compare.py parses its --sizes with it too."""
    s = s.strip()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1:].lower(), 1)
    n = int(s[:-1] if mult > 1 else s) * mult // 4 * 4
    if n <= 0:
        raise ValueError(s)
    return n


def warmup_count(warmup, nbytes):
    return max(1, min(warmup, (64 << 20) // max(nbytes, 1))) if warmup else 0


def pattern(torch, count, rank):
    i = torch.arange(count, dtype=torch.int64)
    return ((i * 7 + rank * 3 + 1) % 8).to(torch.float32)


def expected(torch, count, np_):
    i = torch.arange(count, dtype=torch.int64)
    total = torch.zeros(count, dtype=torch.int64)
    for r in range(np_):
        total += (i * 7 + r * 3 + 1) % 8
    return total.to(torch.float32)


class TorchGloo:
    """torch.distributed.all_reduce (gloo), in place."""
    impl = "torch-gloo"

    def __init__(self, torch, rank, np_, init_method):
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=np_)
        self.title = f"torch.distributed.all_reduce, gloo backend, torch {torch.__version__}"

    def loop(self, buf, nbytes, iters):
        all_reduce = self.dist.all_reduce
        for _ in range(iters):
            all_reduce(buf)

    def reduced(self, buf, nbytes):
        self.dist.all_reduce(buf)
        return buf

    def barrier(self):
        self.dist.barrier()

    def all_max(self, t):
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t

    def all_sum(self, t):
        self.dist.all_reduce(t)
        return t

    def close(self):
        self.dist.destroy_process_group()


class HvdTorch:
    """hvd.torch.allreduce: out of place, op=Sum, one name per size."""
    impl = "hvd-torch"

    def __init__(self, torch, rank, np_, init_method):
        # hvd's ranks meet through its own env rendezvous: a file store in the same directory.
        store = os.path.join(os.path.dirname(init_method), "hvd-rendezvous")  # file://<dir>/...
        os.environ.update(HVD_RANK=str(rank), HVD_SIZE=str(np_), HVD_RENDEZVOUS=store)
        import hvd.torch as hvd
        self.hvd = hvd
        hvd.init()
        self.title = f"hvd.torch.allreduce (out of place), torch {torch.__version__}"

    @staticmethod
    def name(nbytes):
        return f"bench.{nbytes}"

    def loop(self, buf, nbytes, iters):
        # The name made once per loop, as a training loop's names are.
        allreduce, op, name = self.hvd.allreduce, self.hvd.Sum, self.name(nbytes)
        for _ in range(iters):
            allreduce(buf, op=op, name=name)  # the result is dropped at once

    def reduced(self, buf, nbytes):
        return self.hvd.allreduce(buf, op=self.hvd.Sum, name=self.name(nbytes))

    def barrier(self):
        self.hvd.barrier()

    def all_max(self, t):
        return self.hvd.allreduce(t, op=self.hvd.Max, name="bench.max")

    def all_sum(self, t):
        return self.hvd.allreduce(t, op=self.hvd.Sum, name="bench.sum")

    def close(self):
        self.hvd.shutdown()


BACKENDS = {"gloo": TorchGloo, "hvd": HvdTorch}


def run_rank(rank, np_, init_method, args):
    import torch

    torch.set_num_threads(1)
    b = BACKENDS[args.backend](torch, rank, np_, init_method)
    try:
        if args.hello:
            v = b.all_sum(torch.tensor([rank + 1], dtype=torch.int32))
            if int(v[0]) != np_ * (np_ + 1) // 2:
                print(f"torch_allreduce: rank {rank}: allreduce gave {int(v[0])}", file=sys.stderr)
                return 1
            return 0
        return run_sizes(torch, b, rank, np_, args)
    finally:
        b.close()


def slowest(torch, b, seconds):
    return float(b.all_max(torch.tensor([seconds], dtype=torch.float64))[0])


def timed(torch, b, buf, nbytes, iters):
    b.barrier()
    t0 = time.perf_counter()
    b.loop(buf, nbytes, iters)
    return slowest(torch, b, time.perf_counter() - t0)


def run_sizes(torch, b, rank, np_, args):
    total_wrong = 0
    if rank == 0:
        print(f"# torch_allreduce: {b.title}, {np_} ranks")
        print(f"# {'size(B)':>10} {'iters':>7} {'time(us)':>11} {'busbw(GB/s)':>12} {'#wrong':>8}")
    for nbytes in args.sizes:
        count = nbytes // 4
        if count == 0:
            continue
        buf = pattern(torch, count, rank)
        b.loop(buf, nbytes, warmup_count(args.warmup, nbytes))
        iters = args.iters
        if iters == 0:
            n = 1
            t = timed(torch, b, buf, nbytes, n)
            while t < TARGET_S / 10 and n < MAX_ITERS:
                n = min(MAX_ITERS, n * 4)
                t = timed(torch, b, buf, nbytes, n)
            iters = max(1, min(MAX_ITERS, math.ceil(TARGET_S * n / max(t, 1e-9))))
        seconds = timed(torch, b, buf, nbytes, iters)
        wrong = 0
        if args.check:
            out = b.reduced(pattern(torch, count, rank), nbytes)
            w = torch.tensor([int((out != expected(torch, count, np_)).sum())], dtype=torch.int64)
            wrong = int(b.all_sum(w)[0])
            if wrong and rank == 0:
                print(f"torch_allreduce: {wrong} wrong elements at {count * 4} bytes",
                      file=sys.stderr)
        total_wrong += wrong
        if rank == 0:
            per_op = seconds / iters
            busbw = count * 4 / per_op / 1e9 * 2 * (np_ - 1) / np_
            print(f"  {count * 4:>10} {iters:>7} {per_op * 1e6:>11.1f} {busbw:>12.3f} {wrong:>8}")
            if args.results:
                print(f"RESULT impl={b.impl} np={np_} bytes={count * 4} iters={iters} "
                      f"us={per_op * 1e6:.3f} wrong={wrong if args.check else -1} "
                      "memcpy_gbs=0.000 reduce2t_gbs=0.000")
            sys.stdout.flush()
    return 0 if total_wrong == 0 else 1


def spawned(rank, np_, init_method, args):
    code = run_rank(rank, np_, init_method, args)
    if code:
        sys.exit(code)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-np", type=int, default=0, help="ranks to spawn (else: torchrun's env)")
    p.add_argument("--sizes", default="4K", help="comma-separated sizes, e.g. 4K,64K,1M")
    p.add_argument("--iters", type=int, default=0, help="timed ops per size (0: calibrated)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--check", type=int, default=1, choices=(0, 1))
    p.add_argument("--results", type=int, default=0, choices=(0, 1))
    p.add_argument("--backend", default="gloo", choices=sorted(BACKENDS),
                   help="gloo: torch.distributed (default); hvd: hvd.torch.allreduce")
    p.add_argument("--hello", type=int, default=0, choices=(0, 1),
                   help="only init and one allreduce of one int (launch timing)")
    args = p.parse_args()
    try:
        args.sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes: expected comma-separated sizes like 4K,64K,1M, got '{args.sizes}'")
    if args.backend == "hvd" and args.np == 0:
        p.error("--backend hvd: give -np (the script starts hvd's ranks itself)")
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and args.np == 0:
        # Under torchrun: it set MASTER_ADDR/MASTER_PORT, RANK and WORLD_SIZE.
        sys.exit(run_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), "env://", args))
    if args.np < 1 or args.np > 64:
        p.error("-np: expected a rank count 1..64 (or run under torchrun)")
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="hvd-torch-bench-") as d:
        mp.spawn(spawned, args=(args.np, f"file://{d}/store", args), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
