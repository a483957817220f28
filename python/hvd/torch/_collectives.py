"""Horovod's other collectives over hvd's C ABI: allgather, broadcast, alltoall, reducescatter
(and their grouped forms), sparse allreduce (two allgathers), the byte collectives behind
broadcast_object/allgather_object, and their autograd functions.

Results owned by the runtime (allgather, alltoall, reducescatter, bytes) become tensors with the
shape the runtime reports: views of the runtime's device memory where the process set runs NCCL,
else copies of its host memory, moved to the input's device (hvd.torch._handles.output); alltoall's received splits and allgather's per-rank
rows come from hvd_handle_output_splits. As in hvd.torch._allreduce, the synchronous functions
wait without the handle table and use autograd only when the result needs a gradient.
"""
import torch

from hvd.common import basics as _b
from hvd.common.process_sets import global_process_set
from hvd.torch import _handles as _h
from hvd.torch._allreduce import allreduce, allreduce_async, any_needs_grad, \
    compressed_group, needs_grad
from hvd.torch._handles import synchronize
from hvd.torch.compression import Compression

_lib = _b.lib
Average, Sum = _b.Average, _b.Sum


def _outputs(ptr, dtypes, devices, with_splits):
    """Every result of an operation as tensors of `dtypes` on `devices` (the inputs'), and
    (with_splits) their rows per rank."""
    outs = [_h.output(ptr, i, dtype, dev) for i, (dtype, dev) in enumerate(zip(dtypes, devices))]
    return (outs, [_h.splits(ptr, i) for i in range(len(dtypes))]) if with_splits else outs


# ---- allgather ----------------------------------------------------------------------------------

def _allgather(tensors, grouped, name, process_set, with_splits=False):
    """Enqueues an allgather of `tensors` (one unit when grouped); (ptr, keep, finish), finish
    giving the list of outputs (and with_splits, the rows each rank gave)."""
    ps_id = _h.set_id(process_set)
    kind = "grouped_allgather" if grouped else "allgather"
    tensors, bufs, descs = _h.input_descs(tensors, kind)
    if grouped:
        arr = _h.desc_array(descs)
        ptr = _lib.hvd_enqueue_grouped_allgather(_h.op_name(kind, name), len(tensors), arr, ps_id)
    else:
        arr = None
        ptr = _lib.hvd_enqueue_allgather(_h.op_name(kind, name), descs[0], ps_id)
    dtypes = [t.dtype for t in tensors]
    devices = [d.device for d in descs]
    return ptr, (bufs, arr), lambda p, k: _outputs(p, dtypes, devices, with_splits)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along the first dimension (which may differ
    between ranks; the others must agree); synchronize() returns the concatenation."""
    ptr, keep, finish = _allgather([tensor], False, name, process_set)
    return _h.submit(ptr, keep, lambda p, k: finish(p, k)[0])


class HorovodAllgather(torch.autograd.Function):
    """Differentiable allgather. As Horovod, the gradient is this rank's rows of the gradient
    averaged over the set's ranks."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        outputs, splits = _h.run(*_allgather([tensor], False, name, process_set, True))
        ctx.splits = splits[0]
        return outputs[0]

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        offset = sum(ctx.splits[:_h.set_rank(ctx.process_set)])
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension and returns the result
    (`tensor` is not modified). Differentiable."""
    if needs_grad(tensor):
        return HorovodAllgather.apply(tensor, name, process_set)
    return _h.run(*_allgather([tensor], False, name, process_set))[0]


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one unit; synchronize() returns a list."""
    return _h.submit(*_allgather(tensors, True, name, process_set))


class HorovodGroupedAllgather(torch.autograd.Function):
    """Differentiable grouped allgather (gradients as HorovodAllgather's)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        outputs, ctx.splits = _h.run(*_allgather(tensors, True, name, process_set, True))
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_output):
        handles = [allreduce_async(g, op=Average, process_set=ctx.process_set)
                   for g in grad_output]
        reduced = [synchronize(h) for h in handles]
        r = _h.set_rank(ctx.process_set)
        grads = [g.narrow(0, sum(s[:r]), d) for g, s, d in zip(reduced, ctx.splits, ctx.dims)]
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors as one unit; returns a list. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather: the list of tensors is empty")
    if any_needs_grad(tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return _h.run(*_allgather(tensors, True, name, process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by allgathering its indices and values (the sum of sparse
    tensors is their concatenation; Average divides the values by the set's size). Returns a
    callable handle: synchronize(handle) (or handle()) gives the sparse result."""
    t = tensor
    base = name if name else None
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(),
                                     name=(base + ".indices") if base else None,
                                     process_set=process_set)
    values_handle = allgather_async(t._values(), name=(base + ".values") if base else None,
                                    process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        if op == Average:
            values = values / _h.set_size(process_set)
        if indices.dim() == 0 or values.dim() == 0:
            return torch.sparse_coo_tensor(size=t.size(), dtype=t.dtype)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())

    return handle


# ---- broadcast ----------------------------------------------------------------------------------

def _broadcast(tensor, inplace, root_rank, name, process_set):
    """Enqueues a broadcast into `tensor` (in place) or a copy of it; (ptr, keep, finish)."""
    ps_id = _h.set_id(process_set)
    root = _h.root_index(root_rank, "broadcast")
    dtype, device = _h.check_tensor(tensor, "broadcast")
    if inplace:
        d, keep, finish = _h.inplace(tensor, dtype, device)
    else:
        keep = tensor.clone(memory_format=torch.contiguous_format)
        d = _h.desc(keep, dtype, device)
        finish = None  # the result is keep
    ptr = _lib.hvd_enqueue_broadcast(_h.op_name("broadcast", name), d, root, ps_id)
    return ptr, keep, finish


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying `tensor` of rank `root_rank` (a job rank, member of the set) to every rank
    of the set; synchronize() returns a new tensor (`tensor` is not modified)."""
    return _h.submit(*_broadcast(tensor, False, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """As broadcast_async, in place: synchronize() returns `tensor` holding the root's values."""
    return _h.submit(*_broadcast(tensor, True, root_rank, name, process_set))


class HorovodBroadcast(torch.autograd.Function):
    """Differentiable broadcast. As Horovod, the gradient is the gradient averaged over the set's
    ranks on the root, and zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _h.run(*_broadcast(tensor, False, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if _b.rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns `tensor` as it is on `root_rank` (a new tensor). Differentiable."""
    if needs_grad(tensor):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return _h.run(*_broadcast(tensor, False, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with its value on `root_rank`; returns it."""
    return _h.run(*_broadcast(tensor, True, root_rank, name, process_set))


# ---- alltoall -----------------------------------------------------------------------------------

def _alltoall(tensor, splits, name, process_set):
    """Enqueues an alltoall; (ptr, keep, finish), finish giving (output, received_splits)."""
    ps_id = _h.set_id(process_set)
    dtype, device = _h.check_tensor(tensor, "alltoall")
    splits_dtype = torch.int32
    arr, n = None, 0
    if splits is not None:
        if isinstance(splits, torch.Tensor):
            splits_dtype = splits.dtype
            values = [int(x) for x in splits.reshape(-1).tolist()]
        else:
            values = [int(x) for x in splits]
        if values:
            arr, n = _h.int64_array(values), len(values)
    src = _h.contiguous(tensor)
    ptr = _lib.hvd_enqueue_alltoall(_h.op_name("alltoall", name), _h.desc(src, dtype, device),
                                    arr, n, ps_id)
    torch_dtype = tensor.dtype
    # As Horovod: the received splits are on the device of a `splits` tensor, else on the host.
    splits_device = splits.device if isinstance(splits, torch.Tensor) else None

    def finish(p, keep):
        return (_h.output(p, 0, torch_dtype, device),
                torch.tensor(_h.splits(p, 0), dtype=splits_dtype, device=splits_device))

    return ptr, (src, arr), finish


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[i] first-dimension rows of `tensor` to the set's i-th rank (splits:
    a list or integer tensor with one entry per rank of the set, summing to at most the first
    dimension: the rows past their sum are not sent, as Horovod; None divides the first dimension
    evenly). synchronize() returns (output, received_splits): the rows received, concatenated in
    rank order, and how many came from each rank (int32, or the dtype of a `splits` tensor)."""
    return _h.submit(*_alltoall(tensor, splits, name, process_set))


class HorovodAlltoall(torch.autograd.Function):
    """Differentiable alltoall: the gradient goes back with an alltoall by the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = _h.run(*_alltoall(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        ctx.rows = tensor.shape[0]
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad, _ = alltoall(grad_output, splits=ctx.recvsplits, process_set=ctx.process_set)
        if grad.shape[0] < ctx.rows:  # rows past the splits' sum were not sent: no gradient
            grad = torch.cat([grad, grad.new_zeros((ctx.rows - grad.shape[0],) + grad.shape[1:])])
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` to the set's i-th rank and returns what this rank received,
    as Horovod: the output tensor when `splits` is None (even division), else the pair
    (output, received_splits). Differentiable."""
    if needs_grad(tensor):
        return HorovodAlltoall.apply(tensor, splits, name, process_set)
    output, received_splits = _h.run(*_alltoall(tensor, splits, name, process_set))
    return output if splits is None else (output, received_splits)


# ---- reducescatter ------------------------------------------------------------------------------

def _reducescatter(tensors, grouped, name, op, process_set, prescale_factor, postscale_factor):
    """Enqueues a reducescatter of `tensors` (one unit when grouped); (ptr, keep, finish), finish
    giving the list of this rank's shares."""
    ps_id = _h.set_id(process_set)
    c_op = _b.hvd_op(op)
    kind = "grouped_reducescatter" if grouped else "reducescatter"
    tensors, bufs, descs = _h.input_descs(tensors, kind)
    if grouped:
        arr = _h.desc_array(descs)
        ptr = _lib.hvd_enqueue_grouped_reducescatter(_h.op_name(kind, name), len(tensors), arr,
                                                     c_op, prescale_factor, postscale_factor,
                                                     ps_id)
    else:
        arr = None
        ptr = _lib.hvd_enqueue_reducescatter(_h.op_name(kind, name), descs[0], c_op,
                                             prescale_factor, postscale_factor, ps_id)
    dtypes = [t.dtype for t in tensors]
    devices = [d.device for d in descs]
    return ptr, (bufs, arr), lambda p, k: _outputs(p, dtypes, devices, False)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over the set (op: Average or Sum) and scattering the result along
    the first dimension: rank i of the set gets the i-th share (shares as even as possible, lower
    ranks taking one extra row). synchronize() returns this rank's share."""
    ptr, keep, finish = _reducescatter([tensor], False, name, op, process_set, prescale_factor,
                                       postscale_factor)
    return _h.submit(ptr, keep, lambda p, k: finish(p, k)[0])


def _reducescatter_grad(grad, ctx):
    scale = float(ctx.prescale_factor) * float(ctx.postscale_factor)
    if ctx.op == Sum:
        scale *= _h.set_size(ctx.process_set)
    return grad * scale if scale != 1.0 else grad


class HorovodReducescatter(torch.autograd.Function):
    """Differentiable reducescatter. As Horovod, the gradient is the allgather of the gradient,
    multiplied by the set's size for Sum (and by the scale factors)."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return _h.run(*_reducescatter([tensor], False, name, op, process_set, prescale_factor,
                                      postscale_factor))[0]

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(_reducescatter_grad(grad_output, ctx), process_set=ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's share of the first dimension.
    Differentiable."""
    compressed, ctx = compression.compress(tensor)
    if needs_grad(compressed):
        out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    else:
        out = _h.run(*_reducescatter([compressed], False, name, op, process_set,
                                     prescale_factor, postscale_factor))[0]
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescattering a list of tensors as one unit; synchronize() returns a list."""
    return _h.submit(*_reducescatter(tensors, True, name, op, process_set, prescale_factor,
                                     postscale_factor))


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Differentiable grouped reducescatter (gradients as HorovodReducescatter's)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(_h.run(*_reducescatter(tensors, True, name, op, process_set,
                                            prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        handles = [allgather_async(_reducescatter_grad(g, ctx), process_set=ctx.process_set)
                   for g in grad_output]
        return (None, None, None, None, None) + tuple(synchronize(h) for h in handles)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one unit; returns a list. Differentiable."""
    return compressed_group(
        tensors, compression, "grouped_reducescatter",
        lambda *ts: HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                      postscale_factor, *ts),
        lambda ts: _h.run(*_reducescatter(ts, True, name, op, process_set, prescale_factor,
                                          postscale_factor)))


# ---- bytes (object collectives) -----------------------------------------------------------------

def broadcast_bytes(data, root_rank, name, process_set):
    """`data` of rank `root_rank` (an int: broadcast_object checked it) on every rank of the set
    (other ranks' `data` is ignored)."""
    ps_id = _h.set_id(process_set)
    is_root = _b.rank() == root_rank
    data = bytes(data) if is_root else b""
    ptr = _lib.hvd_enqueue_broadcast_bytes(_h.op_name("broadcast_object", name), data or None,
                                           len(data), root_rank, ps_id)
    return _h.run(ptr, data, lambda p, k: data if is_root else _h.output_bytes(p))


def allgather_bytes(data, name, process_set):
    """Every rank's `data` (bytes of any length), in the set's rank order."""
    ps_id = _h.set_id(process_set)
    data = bytes(data)
    ptr = _lib.hvd_enqueue_allgather_bytes(_h.op_name("allgather_object", name), data or None,
                                           len(data), ps_id)

    def finish(p, keep):
        blob, out, at = _h.output_bytes(p), [], 0
        for count in _h.splits(p, 0):
            out.append(blob[at:at + count])
            at += count
        return out

    return _h.run(ptr, data, finish)
