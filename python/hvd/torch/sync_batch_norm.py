"""Synchronous batch normalization (Horovod's horovod.torch.SyncBatchNorm), on host tensors.

In training, the batch statistics are those of the whole batch across the ranks of the process
set: every rank's count, mean and sum of squared deviations are allgathered (one small message
per layer) and combined exactly (Chan et al.'s pairwise formula), so the result equals
torch.nn.BatchNorm on the concatenated batch. Backward allreduces the two per-channel sums the
input gradient needs. Weight and bias gradients stay local: DistributedOptimizer averages them.
"""
import torch
import torch.nn.functional as F
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.common.process_sets import global_process_set
from hvd.torch._handles import set_size as _set_size
from hvd.torch.mpi_ops import allgather_async, allreduce_async, synchronize, Sum


class SyncBatchNorm(_BatchNorm):
    """Applies batch normalization over N-dimensional input (N, C, ...) with statistics
    synchronized across the ranks of `process_set` during training.

    Arguments: as torch.nn.BatchNorm1d/2d/3d (num_features, eps, momentum, affine,
    track_running_stats), plus process_set (default: every rank).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def _run_bn(self, input, factor):
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                            self.training or not self.track_running_stats, factor, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training and self.track_running_stats:
            return self._run_bn(input, factor)
        if _set_size(self.process_set) == 1:
            return self._run_bn(input, factor)
        running = self.training and self.track_running_stats
        return _SyncBatchNorm.apply(input, self.weight, self.bias,
                                    self.running_mean if running else None,
                                    self.running_var if running else None,
                                    self.eps, factor, self.process_set)


def _channel_view(t, ndim):
    return t.view([1, -1] + [1] * (ndim - 2))


class _SyncBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, process_set):
        x = input.contiguous()
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(acc)
        c = x.size(1)
        dims = [0] + list(range(2, x.dim()))
        count = x.numel() // c if c else 0
        if count > 0:
            local_mean = xf.mean(dims)
            local_m2 = ((xf - _channel_view(local_mean, x.dim())) ** 2).sum(dims)
        else:
            local_mean = torch.zeros(c, dtype=acc, device=x.device)
            local_m2 = torch.zeros(c, dtype=acc, device=x.device)
        stats = torch.cat([torch.tensor([float(count)], dtype=acc, device=x.device), local_mean,
                           local_m2])
        gathered = synchronize(allgather_async(stats.unsqueeze(0), name="sync_batch_norm.stats",
                                               process_set=process_set))
        counts = gathered[:, 0:1]
        means = gathered[:, 1:1 + c]
        m2s = gathered[:, 1 + c:]
        total = counts.sum()
        if float(total) <= 0:
            raise ValueError("SyncBatchNorm: the batch is empty on every rank")
        mean = (counts * means).sum(0) / total
        m2 = m2s.sum(0) + (counts * (means - mean) ** 2).sum(0)
        var = m2 / total
        invstd = torch.rsqrt(var + eps)

        if running_mean is not None:
            with torch.no_grad():
                unbiased = m2 / (total - 1) if float(total) > 1 else var
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype),
                                                    alpha=momentum)

        out = (xf - _channel_view(mean, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            out = out * _channel_view(weight.to(acc), x.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(acc), x.dim())
        ctx.save_for_backward(x, weight, mean, invstd, total)
        ctx.process_set = process_set
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, mean, invstd, total = ctx.saved_tensors
        acc = mean.dtype
        nd = x.dim()
        dims = [0] + list(range(2, nd))
        dy = grad_output.contiguous().to(acc)
        xmu = x.to(acc) - _channel_view(mean, nd)
        sum_dy = dy.sum(dims)
        sum_dy_xmu = (dy * xmu).sum(dims)
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]

        grad_input = None
        if need_input:
            both = torch.cat([sum_dy, sum_dy_xmu])
            both = synchronize(allreduce_async(both, op=Sum, name="sync_batch_norm.grad",
                                               process_set=ctx.process_set))
            c = sum_dy.numel()
            mean_dy = both[:c] / total
            mean_dy_xmu = both[c:] / total
            scale = invstd if weight is None else invstd * weight.to(acc)
            grad_input = (dy - _channel_view(mean_dy, nd)
                          - xmu * _channel_view(invstd * invstd * mean_dy_xmu, nd))
            grad_input = (grad_input * _channel_view(scale, nd)).to(x.dtype)

        grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) \
            if weight is not None and need_weight else None
        grad_bias = sum_dy.to(weight.dtype if weight is not None else x.dtype) \
            if need_bias else None
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
