"""SyncBatchNorm on each rank's rows equals torch's BatchNorm on the whole batch: outputs, running
statistics, input gradients, and (summed over ranks) weight and bias gradients."""
import pytest
import torch

pytestmark = pytest.mark.usefixtures("hvd_session")


@pytest.mark.parametrize("shape,momentum", [((2, 5), 0.1), ((3, 4, 6), 0.3), ((2, 3, 4, 5), None)])
def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch(hvd, shape, momentum):
    n, r = hvd.size(), hvd.rank()
    c = shape[1]
    rows = [k + 2 for k in range(n)]  # uneven shares of the batch
    g = torch.Generator().manual_seed(3)
    full = torch.randn((sum(rows),) + shape[1:], generator=g, dtype=torch.float64) * 3 + 1
    grad_full = torch.randn(full.shape, generator=g, dtype=torch.float64)
    start = sum(rows[:r])
    mine = slice(start, start + rows[r])

    bn_cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d}
    ref = bn_cls[len(shape)](c, momentum=momentum).double()
    sync = hvd.SyncBatchNorm(c, momentum=momentum).double()
    with torch.no_grad():
        for m in (ref, sync):
            m.weight.copy_(torch.linspace(0.5, 2.0, c))
            m.bias.copy_(torch.linspace(-1.0, 1.0, c))

    for step in range(2):  # running statistics accumulate over steps
        x_ref = full.clone().requires_grad_(True)
        x = full[mine].clone().requires_grad_(True)
        y_ref = ref(x_ref)
        y = sync(x)
        assert torch.allclose(y, y_ref[mine], atol=1e-10), (y - y_ref[mine]).abs().max()
        y_ref.backward(grad_full)
        y.backward(grad_full[mine])
        assert torch.allclose(x.grad, x_ref.grad[mine], atol=1e-10), \
            (x.grad - x_ref.grad[mine]).abs().max()
        wg = hvd.allreduce(sync.weight.grad, op=hvd.Sum)
        bg = hvd.allreduce(sync.bias.grad, op=hvd.Sum)
        assert torch.allclose(wg, ref.weight.grad, atol=1e-9)
        assert torch.allclose(bg, ref.bias.grad, atol=1e-9)
        for m in (ref, sync):
            m.weight.grad = None
            m.bias.grad = None
    assert torch.allclose(sync.running_mean, ref.running_mean, atol=1e-10)
    assert torch.allclose(sync.running_var, ref.running_var, atol=1e-10)
    assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == 2

    # Evaluation uses the running statistics, locally.
    sync.eval()
    ref.eval()
    assert torch.allclose(sync(full[mine]), ref(full)[mine], atol=1e-10)


def test_sync_batch_norm_float32_and_errors(hvd):
    r = hvd.rank()
    bn = hvd.SyncBatchNorm(3)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(r))
    y = bn(x)
    assert y.dtype == torch.float32 and y.shape == x.shape
    everyone = torch.cat(hvd.allgather_object(y.detach()))
    assert torch.allclose(everyone.mean(0), torch.zeros(3), atol=1e-5)
    assert torch.allclose(everyone.var(0, unbiased=False), torch.ones(3), atol=1e-3)
    with pytest.raises(ValueError, match="2D"):
        bn(torch.ones(3))
