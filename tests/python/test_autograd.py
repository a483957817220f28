"""Gradients through every collective, against the values Horovod 0.28 gives:

  allreduce        the allreduce of the gradient with the same op (and scale factors)
  allgather        this rank's rows of the gradient averaged over the ranks
  broadcast        the gradient averaged over the ranks on the root, zero elsewhere
  alltoall         the gradient sent back by an alltoall with the received splits
  reducescatter    the allgather of the gradient (times the set's size for Sum)

Each rank uses a gradient of its own ((rank+1) * ...) so that the reduction shows."""
import pytest
import torch

from helpers import assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


def leaf(t):
    return t.clone().requires_grad_(True)


def test_allreduce_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = n * (n + 1) / 2
    for dtype in (torch.float32, torch.float64):
        x = leaf(torch.arange(6, dtype=dtype).reshape(2, 3))
        y = hvd.allreduce(x, op=hvd.Sum)
        y.backward(torch.ones_like(y) * (r + 1))
        assert_equal(x.grad, torch.full((2, 3), tri, dtype=dtype), "sum")

        x = leaf(torch.ones(4, dtype=dtype))
        y = hvd.allreduce(x)  # Average
        y.backward(torch.ones_like(y) * (r + 1))
        assert_equal(x.grad, torch.full((4,), (n + 1) / 2, dtype=dtype), "average")

        x = leaf(torch.ones(4, dtype=dtype))
        y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0)
        y.backward(torch.ones_like(y))
        assert_equal(x.grad, torch.full((4,), 6.0 * n, dtype=dtype), "scaled")

    x = leaf(torch.ones(4))
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    y.sum().backward()
    assert x.grad.dtype == torch.float32
    assert_equal(x.grad, torch.full((4,), float(n)), "fp16 compressed")

    # Every rank perturbs alike inside gradcheck, so the numerical Jacobian of a sum over ranks
    # is what backward computes.
    x = torch.randn(3, dtype=torch.float64, generator=torch.Generator().manual_seed(7),
                    requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: hvd.allreduce(t, op=hvd.Sum), (x,))


def test_grouped_allreduce_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    a, b = leaf(torch.ones(3)), leaf(torch.ones(2, 2, dtype=torch.float64))
    ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    (ya.sum() * (r + 1) + yb.sum() * 2).backward()
    assert_equal(a.grad, torch.full((3,), n * (n + 1) / 2), "grouped a")
    assert_equal(b.grad, torch.full((2, 2), 2.0 * n, dtype=torch.float64), "grouped b")


def test_allgather_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    x = leaf(torch.full((r + 1, 3), float(r)))
    y = hvd.allgather(x)
    total = n * (n + 1) // 2
    assert y.shape == (total, 3)
    # Row i of every rank's gradient is (rank+1) * (i+1).
    g = torch.arange(1, total + 1, dtype=torch.float32).unsqueeze(1).repeat(1, 3) * (r + 1)
    y.backward(g)
    offset = r * (r + 1) // 2
    want = torch.arange(offset + 1, offset + r + 2, dtype=torch.float32).unsqueeze(1).repeat(1, 3)
    assert_equal(x.grad, want * (n + 1) / 2, "allgather")

    a, b = leaf(torch.ones(r + 1)), leaf(torch.ones(2, 2))
    ya, yb = hvd.grouped_allgather([a, b])
    (ya.sum() * (r + 1) + (yb * 3).sum()).backward()
    assert_equal(a.grad, torch.full((r + 1,), (n + 1) / 2), "grouped allgather a")
    assert_equal(b.grad, torch.full((2, 2), 3.0), "grouped allgather b")


def test_broadcast_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    x = leaf(torch.ones(2, 3) * r)
    y = hvd.broadcast(x, root_rank=root)
    assert_equal(y.detach(), torch.ones(2, 3) * root, "value")
    y.backward(torch.ones(2, 3) * (r + 1))
    want = torch.full((2, 3), (n + 1) / 2) if r == root else torch.zeros(2, 3)
    assert_equal(x.grad, want, "broadcast")


def test_alltoall_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    splits = [d + 1 for d in range(n)]
    x = leaf(torch.arange(sum(splits), dtype=torch.float64).unsqueeze(1).repeat(1, 2))
    y, received = hvd.alltoall(x, splits=splits)
    assert received.tolist() == [r + 1] * n
    # Gradient of the rows received from rank s: (s+1) * 100 + my rank.
    g = torch.cat([torch.full((r + 1, 2), (s + 1) * 100.0 + r, dtype=torch.float64)
                   for s in range(n)])
    y.backward(g)
    # The rows I sent to rank d come back with d's gradient for rows from me.
    want = torch.cat([torch.full((d + 1, 2), (r + 1) * 100.0 + d, dtype=torch.float64)
                      for d in range(n)])
    assert_equal(x.grad, want, "alltoall")

    # Rows past the splits' sum are not sent (Horovod's rule) and get no gradient.
    x = leaf(torch.ones(n + 2, 2))
    y, received = hvd.alltoall(x, splits=[1] * n)
    assert y.shape == (n, 2) and received.tolist() == [1] * n
    (y * (r + 1)).sum().backward()
    want = torch.cat([torch.tensor([[float(d + 1)] * 2 for d in range(n)]), torch.zeros(2, 2)])
    assert_equal(x.grad, want, "alltoall of part of the rows")

    x = leaf(torch.ones(2 * n, 3))
    y = hvd.alltoall(x)
    (y * (r + 1)).sum().backward()
    want = torch.cat([torch.full((2, 3), float(d + 1)) for d in range(n)])
    assert_equal(x.grad, want, "even alltoall")


def test_reducescatter_grad(hvd):
    n, r = hvd.size(), hvd.rank()
    rows = 2 * n
    for op, factor in ((hvd.Sum, n), (hvd.Average, 1)):
        x = leaf(torch.ones(rows, 3))
        y = hvd.reducescatter(x, op=op)
        assert y.shape == (2, 3)
        y.backward(torch.ones(2, 3) * (r + 1))
        want = torch.cat([torch.full((2, 3), float(k + 1)) for k in range(n)]) * factor
        assert_equal(x.grad, want, "reducescatter op %d" % op)

    a, b = leaf(torch.ones(rows)), leaf(torch.ones(rows, 2))
    ya, yb = hvd.grouped_reducescatter([a, b], op=hvd.Sum)
    (ya.sum() + yb.sum() * (r + 1)).backward()
    assert_equal(a.grad, torch.full((rows,), float(n)), "grouped reducescatter a")
    want = torch.cat([torch.full((2, 2), float(k + 1)) for k in range(n)]) * n
    assert_equal(b.grad, want, "grouped reducescatter b")
