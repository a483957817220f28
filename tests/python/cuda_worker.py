"""One rank of a job started by tests/python/test_cuda.py (through local_launch.py): every hvd.torch
collective on CUDA tensors, checked against values computed here.

Each scenario runs on every rank in the same order and prints one line
`RESULT {"name": ..., "status": "passed"|"failed", "detail": ...}`; a failing scenario is
reported and the next one runs (every scenario submits its collectives before it checks
anything, so the ranks stay in step). The rank exits 0 when every scenario passed.

The device is hvd.local_rank() modulo the visible GPUs, or HVD_TEST_GPU when set (several ranks
on one GPU: the runtime stages their tensors through host memory). HVD_TEST_GPU=cpu runs the same
scenarios on host tensors: a check of the scenarios' own expectations on a machine without a GPU.
"""
import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F

import hvd.torch as hvd

hvd.init()
N, R = hvd.size(), hvd.rank()
if os.environ.get("HVD_TEST_GPU") == "cpu":
    DEV = torch.device("cpu")
else:
    DEV = torch.device("cuda", int(os.environ.get("HVD_TEST_GPU",
                                                  hvd.local_rank() % torch.cuda.device_count())))
    torch.cuda.set_device(DEV)
ON_GPU = DEV.type == "cuda"
SCENARIOS = []


def scenario(fn):
    SCENARIOS.append(fn)
    return fn


def on_gpu(t, what):
    assert t.device == DEV, "%s: on %s, expected %s" % (what, t.device, DEV)


def same(actual, expected, what, atol=0.0):
    on_gpu(actual, what)
    expected = expected.to(DEV)
    assert actual.dtype == expected.dtype, "%s: dtype %s, expected %s" % (
        what, actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, "%s: shape %s, expected %s" % (
        what, list(actual.shape), list(expected.shape))
    diff = (actual.double() - expected.double()).abs().max().item() if actual.numel() else 0.0
    assert diff <= atol, "%s: max difference %g (allowed %g)\n%s\nexpected\n%s" % (
        what, diff, atol, actual, expected)


def pattern(shape, dtype, scale=1.0):
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n, device=DEV) % 7).reshape(shape) * scale).to(dtype)


@scenario
def allreduce():
    tri = N * (N + 1) / 2
    for dtype in (torch.float32, torch.float16, torch.int32, torch.bfloat16, torch.float64):
        b = pattern((17, 5), dtype)
        mine = b * (R + 1)
        same(hvd.allreduce(mine, op=hvd.Sum, name="sum.%s" % dtype), b * int(tri),
             "%s sum" % dtype)
        if dtype.is_floating_point:
            same(hvd.allreduce(mine, op=hvd.Average, name="avg.%s" % dtype),
                 (b.double() * (N + 1) / 2).to(dtype), "%s average" % dtype,
                 atol=0.05 if dtype in (torch.float16, torch.bfloat16) else 1e-6)
            same(hvd.allreduce(b, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25),
                 (b.double() * N / 2).to(dtype), "%s scaled" % dtype, atol=0.05)
        same(hvd.allreduce(mine, op=hvd.Max), b * N, "%s max" % dtype)
        same(mine, b * (R + 1), "%s input untouched" % dtype)
    x = pattern((6, 4), torch.float32) * (R + 1)
    y = hvd.allreduce_(x, op=hvd.Sum, name="inplace")
    assert y is x, "allreduce_ returned another tensor"
    same(x, pattern((6, 4), torch.float32) * tri, "in place")
    t = pattern((4, 6), torch.float32).t()  # non-contiguous, in place
    hvd.allreduce_(t, op=hvd.Sum, name="noncontig")
    same(t, pattern((4, 6), torch.float32).t() * N, "non-contiguous in place")
    h = hvd.allreduce_async(torch.full((1000,), float(R), device=DEV), op=hvd.Sum, name="async")
    same(hvd.synchronize(h), torch.full((1000,), float(tri - N)), "async")
    big = torch.full((1 << 20,), 1.0, device=DEV, dtype=torch.float16)
    same(hvd.allreduce(big, op=hvd.Sum, name="big.fp16"),
         torch.full((1 << 20,), float(N), dtype=torch.float16), "1M fp16")


@scenario
def stream_order():
    """Data produced on a side stream behind a long kernel: the runtime must wait for it (an event
    on the tensor's stream), not read what the buffer held before."""
    x = torch.zeros(1 << 22, device=DEV)
    if ON_GPU:
        s = torch.cuda.Stream(device=DEV)
        torch.cuda.synchronize(DEV)
        with torch.cuda.stream(s):
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time before the fill
            x.fill_(R + 1.0)
            y = hvd.allreduce(x, op=hvd.Sum, name="stream.order")
            z = hvd.allreduce_(x, op=hvd.Sum, name="stream.order.inplace")
    else:
        x.fill_(R + 1.0)
        y = hvd.allreduce(x, op=hvd.Sum, name="stream.order")
        z = hvd.allreduce_(x, op=hvd.Sum, name="stream.order.inplace")
    same(y, torch.full((1 << 22,), N * (N + 1) / 2.0), "after a side-stream kernel")
    same(z, torch.full((1 << 22,), N * (N + 1) / 2.0), "in place after a side-stream kernel")


@scenario
def grouped_allreduce():
    shapes = [(3,), (5, 2), (1, 7, 3)]
    dtypes = [torch.float32, torch.float16, torch.float32]
    ts = [pattern(s, d) * (R + 1) for s, d in zip(shapes, dtypes)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="grouped")
    for i, (o, s, d) in enumerate(zip(outs, shapes, dtypes)):
        same(o, pattern(s, d) * int(N * (N + 1) / 2), "grouped %d" % i)
    outs = hvd.grouped_allreduce_([t.clone() for t in ts], op=hvd.Average, name="grouped.inplace")
    for i, (o, s, d) in enumerate(zip(outs, shapes, dtypes)):
        same(o, (pattern(s, torch.float64) * (N + 1) / 2).to(d), "grouped average %d" % i,
             atol=0.05)
    empty = torch.zeros(0, device=DEV)
    same(hvd.grouped_allreduce([empty, ts[0]], op=hvd.Sum, name="grouped.empty")[0], empty.cpu(),
         "an empty tensor in a group")


@scenario
def broadcast():
    for root in sorted({0, N - 1}):
        x = pattern((9, 3), torch.float32) + R
        same(hvd.broadcast(x, root_rank=root, name="bcast.%d" % root),
             pattern((9, 3), torch.float32) + root, "broadcast from %d" % root)
        same(x, pattern((9, 3), torch.float32) + R, "broadcast input untouched")
        hvd.broadcast_(x, root_rank=root, name="bcast_.%d" % root)
        same(x, pattern((9, 3), torch.float32) + root, "broadcast_ from %d" % root)
    h = hvd.broadcast_async_(torch.full((5,), R, device=DEV, dtype=torch.int64), N - 1)
    same(hvd.synchronize(h), torch.full((5,), N - 1, dtype=torch.int64), "async broadcast_")


@scenario
def allgather():
    mine = torch.full((R + 1, 3), float(R), device=DEV)  # uneven first dimensions
    want = torch.cat([torch.full((k + 1, 3), float(k)) for k in range(N)])
    same(hvd.allgather(mine, name="gather"), want, "allgather uneven")
    h = hvd.allgather_async(mine.half(), name="gather.async")
    same(hvd.synchronize(h), want.half(), "allgather async fp16")
    outs = hvd.grouped_allgather([mine, torch.full((2,), R, device=DEV, dtype=torch.int32)],
                                 name="gather.grouped")
    same(outs[0], want, "grouped allgather 0")
    same(outs[1], torch.tensor([k for k in range(N) for _ in range(2)], dtype=torch.int32),
         "grouped allgather 1")
    x = torch.ones(2, 2, device=DEV, requires_grad=True)  # autograd through an allgather
    (hvd.allgather(x, name="gather.grad") * (R + 1)).sum().backward()
    on_gpu(x.grad, "allgather gradient")


@scenario
def alltoall():
    splits = [k + 1 for k in range(N)]  # rank r sends k+1 rows to rank k
    x = torch.cat([torch.full((k + 1, 2), float(R * 10 + k)) for k in range(N)]).to(DEV)
    out, received = hvd.alltoall(x, splits=splits, name="a2a")
    same(out, torch.cat([torch.full((R + 1, 2), float(k * 10 + R)) for k in range(N)]),
         "alltoall uneven")
    assert received.device.type == "cpu" and received.tolist() == [R + 1] * N, received
    out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int64), name="a2a.t")
    same(out, torch.cat([torch.full((R + 1, 2), float(k * 10 + R)) for k in range(N)]),
         "alltoall with a splits tensor")
    assert received.dtype == torch.int64, received
    even = torch.arange(N * 3, device=DEV, dtype=torch.float32).reshape(N, 3) + 100 * R
    same(hvd.alltoall(even, name="a2a.even"),
         torch.stack([torch.arange(R * 3, R * 3 + 3, dtype=torch.float32) + 100 * k
                      for k in range(N)]), "alltoall even")


@scenario
def reducescatter():
    rows = 2 * N + 1  # uneven shares: lower ranks take one row more
    x = pattern((rows, 3), torch.float32) * (R + 1)
    full = pattern((rows, 3), torch.float32) * (N * (N + 1) / 2)
    shares = [rows // N + (1 if k < rows % N else 0) for k in range(N)]
    start = sum(shares[:R])
    same(hvd.reducescatter(x, op=hvd.Sum, name="rs.sum"), full[start:start + shares[R]].cpu(),
         "reducescatter sum")
    same(hvd.reducescatter(x, name="rs.avg"), (full[start:start + shares[R]] / N).cpu(),
         "reducescatter average", atol=1e-5)
    outs = hvd.grouped_reducescatter([x, x.half()], op=hvd.Sum, name="rs.grouped")
    same(outs[0], full[start:start + shares[R]].cpu(), "grouped reducescatter 0")
    same(outs[1], full[start:start + shares[R]].half().cpu(), "grouped reducescatter 1")


@scenario
def compression_fp16():
    x = torch.linspace(-2, 2, 1001, device=DEV) * (R + 1)
    c, ctx = hvd.Compression.fp16.compress(x)
    on_gpu(c, "compressed")
    assert c.dtype == torch.float16, c.dtype
    d = hvd.Compression.fp16.decompress(c, ctx)
    on_gpu(d, "decompressed")
    assert d.dtype == torch.float32, d.dtype
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="fp16")
    same(y, torch.linspace(-2, 2, 1001) * (N * (N + 1) / 2), "fp16-compressed sum", atol=0.05)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1)).to(DEV)


def _train(compression, atol, steps=4, rows=3):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(steps, N * rows, 4, generator=g).to(DEV)
    Y = torch.randn(steps, N * rows, 1, generator=g).to(DEV)
    model, ref = _model(), _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(),
                                   compression=compression)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    mine = slice(R * rows, (R + 1) * rows)
    for s in range(steps):
        F.mse_loss(model(X[s, mine]), Y[s, mine]).backward()
        for p in model.parameters():
            on_gpu(p.grad, "gradient")
        opt.step()
        opt.zero_grad()
        F.mse_loss(ref(X[s]), Y[s]).backward()  # one process on the whole batch
        ref_opt.step()
        ref_opt.zero_grad()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        same(p.detach(), q.detach().cpu(), "parameter %s after %d steps" % (name, steps), atol)


@scenario
def distributed_optimizer():
    _train(hvd.Compression.none, atol=1e-5)


@scenario
def distributed_optimizer_fp16():
    _train(hvd.Compression.fp16, atol=3e-3)


@scenario
def functions():
    torch.manual_seed(R)  # every rank starts elsewhere
    model = torch.nn.Linear(5, 3).to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (R + 1))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    torch.manual_seed(0)
    want = torch.nn.Linear(5, 3)
    same(model.weight.detach(), want.weight.detach(), "broadcast_parameters weight")
    same(model.bias.detach(), want.bias.detach(), "broadcast_parameters bias")
    assert opt.param_groups[0]["lr"] == 0.01, opt.param_groups[0]["lr"]
    for state in opt.state.values():
        on_gpu(state["exp_avg"], "Adam state")
    # Objects are pickled: a CUDA tensor comes back on the sender's device index (as Horovod's).
    obj = hvd.broadcast_object({"w": model.weight.detach() * (R + 1), "r": R}, root_rank=0)
    assert obj["r"] == 0 and obj["w"].device.type == DEV.type, obj
    assert torch.allclose(obj["w"].cpu(), want.weight.detach()), obj
    got = hvd.allgather_object(torch.full((2,), float(R), device=DEV))
    assert len(got) == N
    for k, t in enumerate(got):
        assert t.device.type == DEV.type and t.cpu().tolist() == [float(k)] * 2, (k, t)


@scenario
def sync_batch_norm():
    rows = [k + 2 for k in range(N)]
    g = torch.Generator().manual_seed(3)
    full = (torch.randn(sum(rows), 4, 5, generator=g) * 3 + 1).to(DEV)
    start = sum(rows[:R])
    ref = torch.nn.BatchNorm1d(4).to(DEV)
    sync = hvd.SyncBatchNorm(4).to(DEV)
    x = full[start:start + rows[R]].clone().requires_grad_(True)
    y = sync(x)
    same(y.detach(), ref(full)[start:start + rows[R]].detach().cpu(), "SyncBatchNorm", atol=1e-4)
    y.sum().backward()
    on_gpu(x.grad, "SyncBatchNorm input gradient")
    same(sync.running_mean, ref.running_mean.cpu(), "running mean", atol=1e-5)


@scenario
def join():
    x = torch.full((4,), R + 1.0, device=DEV)
    if R == 0:  # rank 0 has one batch more: the others have joined meanwhile
        same(hvd.allreduce(x, op=hvd.Average, name="join.extra"), torch.full((4,), 1.0),
             "average over the ranks that did not join")
    last = hvd.join(DEV.index)
    assert 0 <= last < N, last
    if N > 1:
        assert last == 0, "rank 0 joined last, got %d" % last
    same(hvd.allreduce(x, op=hvd.Sum, name="after.join"),
         torch.full((4,), N * (N + 1) / 2.0), "allreduce after join")


def main():
    failed = 0
    for fn in SCENARIOS:
        try:
            fn()
            if ON_GPU:
                torch.cuda.synchronize(DEV)
            result = {"name": fn.__name__, "status": "passed", "detail": ""}
        except Exception:  # reported, and the next scenario runs
            failed += 1
            result = {"name": fn.__name__, "status": "failed", "detail": traceback.format_exc()}
        print("RESULT " + json.dumps(result), flush=True)
    hvd.barrier()
    hvd.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
