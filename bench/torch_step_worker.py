#!/usr/bin/python3
"""One rank of a bench/torch_step_bench.py run (started by it, never by hand):

    torch_step_worker.py hvd|ddp|none|latency [--model large|small] [--batch N] [--seconds S]
                         [--module hvd.torch] [--lat-bytes 4096]

hvd, ddp, none: timed training steps (see torch_step_bench.py's docstring); latency: the
synchronous hvd.allreduce loop on a float32 tensor of --lat-bytes (4 KiB). Rank 0 prints RESULT lines for the launcher.
"""
import argparse
import math
import os
import sys
import time

MODELS = {"large": (1024, 1536, 1024, 10), "small": (64, 256, 256, 10)}
WARMUP_STEPS = 5
LAT_WARMUP, LAT_ITERS = 200, 1000


def lat_iters(nbytes):
    """Timed operations for the latency part at `nbytes`: LAT_ITERS up to 64 KiB, then about
    256 MiB of traffic (at least 10)."""
    return LAT_ITERS if nbytes <= 65536 else max(10, min(LAT_ITERS, (256 << 20) // nbytes))


def lat_warmup(nbytes):
    """Untimed operations before the latency part's timed loop: LAT_WARMUP (the first hundred or
    so after init run up to 1.7x slower, Python or C++ alike), at most 64 MiB of traffic but at
    least 16 (the runtime's algorithm choice for a size settles after 16 operations of it), as
    allreduce_bench's --warmup counts them (WarmupCount)."""
    return max(min(LAT_WARMUP, 16), min(LAT_WARMUP, (64 << 20) // nbytes))


def build_model(torch, dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class HvdComm:
    """The little the timing loop needs, over Horovod's API."""

    def __init__(self, args):
        import importlib
        self.hvd = importlib.import_module(args.module)
        self.hvd.init()
        self.rank, self.size = self.hvd.rank(), self.hvd.size()

    def barrier(self):
        import torch
        if hasattr(self.hvd, "barrier"):
            self.hvd.barrier()
        else:
            self.hvd.allreduce(torch.zeros(1), name="bench.barrier")

    def max(self, v):
        return max(self.hvd.allgather_object(v))

    def wrap(self, model, opt):
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = self.hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        self.hvd.broadcast_optimizer_state(opt, root_rank=0)
        return model, opt

    def close(self):
        self.hvd.shutdown()


class DdpComm:
    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def barrier(self):
        self.dist.barrier()

    def max(self, v):
        out = [None] * self.size
        self.dist.all_gather_object(out, v)
        return max(out)

    def wrap(self, model, opt):
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model), opt

    def close(self):
        self.dist.destroy_process_group()


class LocalComm:
    """No communication: the compute-only floor, the same ranks running side by side. Barrier and
    max go through files in the launch's directory, so the ranks size their loops alike and the
    timed loops overlap as the others' do; every rank reports, and the launcher takes the
    slowest."""

    def __init__(self):
        self.rank, self.size = int(os.environ["BENCH_RANK"]), int(os.environ["BENCH_SIZE"])
        self.dir, self.calls = os.environ["BENCH_SYNC_DIR"], 0

    def max(self, v):
        self.calls += 1
        path = lambda r: os.path.join(self.dir, f"sync.{self.calls}.{r}")
        with open(path(self.rank) + ".tmp", "w") as f:
            f.write(repr(float(v)))
        os.rename(path(self.rank) + ".tmp", path(self.rank))  # readers see all of it or nothing
        deadline = time.monotonic() + 120
        while not all(os.path.exists(path(r)) for r in range(self.size)):
            if time.monotonic() > deadline:
                raise RuntimeError("local barrier: the other ranks never arrived")
            time.sleep(0.0005)
        values = []
        for r in range(self.size):
            with open(path(r)) as f:
                values.append(float(f.read()))
        return max(values)

    def barrier(self):
        self.max(0)

    def wrap(self, model, opt):
        return model, opt

    def close(self):
        pass


def worker_steps(comm, args):
    import torch
    import torch.nn.functional as F

    dims = MODELS[args.model]
    torch.manual_seed(1)
    model = build_model(torch, dims)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, opt = comm.wrap(model, opt)
    g = torch.Generator().manual_seed(100 + comm.rank)
    x = torch.randn(args.batch, dims[0], generator=g)
    y = torch.randint(0, dims[-1], (args.batch,), generator=g)

    def steps(n):
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return comm.max(time.perf_counter() - t0)

    steps(WARMUP_STEPS)
    n, t = 1, steps(1)
    while t < 0.1 and n < 2000:
        n = min(2000, n * 4)
        t = steps(n)
    n = max(5, min(2000, math.ceil(args.seconds * n / t)))
    t = steps(n)
    if comm.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"RESULT impl={args.worker} np={comm.size} model={args.model} steps={n} "
              f"step_ms={t / n * 1e3:.4f} samples_s={comm.size * args.batch * n / t:.1f} "
              f"params={params}", flush=True)


def worker_latency(comm, args):
    import torch

    hvd = comm.hvd
    iters = lat_iters(args.lat_bytes)
    for name, call in (("allreduce", hvd.allreduce), ("allreduce_", hvd.allreduce_)):
        t = torch.zeros(args.lat_bytes // 4)  # float32 zeros stay zeros under Sum
        op_name = f"bench.lat{args.lat_bytes}"  # made once, as allreduce_bench does
        for _ in range(lat_warmup(args.lat_bytes)):
            call(t, name=op_name, op=hvd.Sum)
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call(t, name=op_name, op=hvd.Sum)
        s = comm.max(time.perf_counter() - t0)
        if comm.rank == 0:
            print(f"RESULT impl=py-{name} np={comm.size} bytes={args.lat_bytes} "
                  f"us={s / iters * 1e6:.3f}", flush=True)


def worker_main(args):
    import torch

    torch.set_num_threads(1)
    comm = (HvdComm(args) if args.worker in ("hvd", "latency") else
            LocalComm() if args.worker == "none" else DdpComm())
    try:
        (worker_latency if args.worker == "latency" else worker_steps)(comm, args)
    finally:
        comm.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("worker", choices=["hvd", "ddp", "none", "latency"])
    p.add_argument("--model", default="large", choices=sorted(MODELS))
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--module", default="hvd.torch")
    p.add_argument("--lat-bytes", type=int, default=4096, help="latency: the tensor's bytes")
    return worker_main(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
