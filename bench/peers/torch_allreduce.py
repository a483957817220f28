#!/usr/bin/python3
"""torch_allreduce: torch.distributed.all_reduce with the gloo backend (PyTorch's CPU path),
timed and checked the way hvd's allreduce loop does it (bench/allreduce_loop.h), for
bench/peers/compare.py. Runs under /usr/bin/python3 (Debian's python3-torch).

    torch_allreduce.py -np 2 [--sizes 4K,1M] [--results 1]      spawns its ranks (file:// store)
    torchrun --nproc_per_node 2 torch_allreduce.py --hello 1      launch test: one allreduce

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


def run_rank(rank, np_, init_method, args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=np_)
    try:
        if args.hello:
            v = torch.tensor([rank + 1], dtype=torch.int32)
            dist.all_reduce(v)
            if int(v[0]) != np_ * (np_ + 1) // 2:
                print(f"torch_allreduce: rank {rank}: allreduce gave {int(v[0])}", file=sys.stderr)
                return 1
            return 0
        return run_sizes(torch, dist, rank, np_, args)
    finally:
        dist.destroy_process_group()


def slowest(torch, dist, seconds):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t[0])


def timed(torch, dist, buf, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return slowest(torch, dist, time.perf_counter() - t0)


def run_sizes(torch, dist, rank, np_, args):
    total_wrong = 0
    if rank == 0:
        print(f"# torch_allreduce: torch.distributed.all_reduce, gloo backend, torch "
              f"{torch.__version__}, {np_} ranks")
        print(f"# {'size(B)':>10} {'iters':>7} {'time(us)':>11} {'busbw(GB/s)':>12} {'#wrong':>8}")
    for nbytes in args.sizes:
        count = nbytes // 4
        if count == 0:
            continue
        buf = pattern(torch, count, rank)
        for _ in range(warmup_count(args.warmup, nbytes)):
            dist.all_reduce(buf)
        iters = args.iters
        if iters == 0:
            n = 1
            t = timed(torch, dist, buf, n)
            while t < TARGET_S / 10 and n < MAX_ITERS:
                n = min(MAX_ITERS, n * 4)
                t = timed(torch, dist, buf, n)
            iters = max(1, min(MAX_ITERS, math.ceil(TARGET_S * n / max(t, 1e-9))))
        seconds = timed(torch, dist, buf, iters)
        wrong = 0
        if args.check:
            buf.copy_(pattern(torch, count, rank))
            dist.all_reduce(buf)
            w = torch.tensor([int((buf != expected(torch, count, np_)).sum())], dtype=torch.int64)
            dist.all_reduce(w)
            wrong = int(w[0])
            if wrong and rank == 0:
                print(f"torch_allreduce: {wrong} wrong elements at {count * 4} bytes",
                      file=sys.stderr)
        total_wrong += wrong
        if rank == 0:
            per_op = seconds / iters
            busbw = count * 4 / per_op / 1e9 * 2 * (np_ - 1) / np_
            print(f"  {count * 4:>10} {iters:>7} {per_op * 1e6:>11.1f} {busbw:>12.3f} {wrong:>8}")
            if args.results:
                print(f"RESULT impl=torch-gloo np={np_} bytes={count * 4} iters={iters} "
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
    p.add_argument("--hello", type=int, default=0, choices=(0, 1),
                   help="only init and one allreduce of one int (launch timing)")
    args = p.parse_args()
    try:
        args.sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    except ValueError:
        p.error(f"--sizes: expected comma-separated sizes like 4K,64K,1M, got '{args.sizes}'")
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
