"""Horovod's allreduce family over hvd's C ABI: allreduce and grouped allreduce (synchronous,
asynchronous, in place) and their autograd functions. (sparse_allreduce_async, made of two
allgathers, is in hvd.torch._collectives.)

The synchronous functions wait without the handle table, and call the autograd function only
when the result needs a gradient (an input requires one and grad mode is on): the result is the
same, without autograd's cost per call.
"""
import torch

from hvd.common import basics as _b
from hvd.common.exceptions import error_from_status as _error_from_status
from hvd.common.process_sets import global_process_set
from hvd.common.util import get_average_backwards_compatibility_fun
from hvd.torch import _handles as _h
from hvd.torch import _output_pool as _pool
from hvd.torch.compression import Compression

_lib = _b.lib
# The allreduce calls without ctypes (hvd.common._fastcall); None where it is missing.
_fast = _b.fastcall
_enqueue_allreduce = _lib.hvd_enqueue_allreduce
# For a caller that waits at once: it may run on this thread, and is waited for in the same call.
# The same function without argtypes, every argument passed ready-made (c_double, c_int64,
# byref; ints as C int): ctypes then converts nothing, which saves ~0.4 us of the ~4 us a 4 KiB
# synchronous allreduce costs here (hvd_run_allreduce_for's prototype: hvd.common.basics).
_run_allreduce_for = _lib["hvd_run_allreduce_for"]
_run_allreduce_for.restype = _b.ctypes.c_int
_ONE = _b.ctypes.c_double(1.0)
_FIRST_WAIT_MS = 100
_FIRST_WAIT_MS_C = _b.ctypes.c_int64(_FIRST_WAIT_MS)
_Pending = _b.ctypes.c_void_p
_byref = _b.ctypes.byref
_c_double = _b.ctypes.c_double
_last_error = _b.last_error
_wait = _b.wait
Average = _b.Average

_HVD_OPS = _b.HVD_OPS
_DTYPES = _h.DTYPES
_Tensor = torch.Tensor
_STRIDED = torch.strided
_names = _h.names("allreduce")
# Fewer elements than this: below the output pool's threshold whatever the dtype (8 bytes at most).
_SMALL_NUMEL = _pool.MIN_BYTES // 8
handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_b)


def _configure_tensor_path():
    """hvd.common._fastcall's tensor path (the synchronous allreduce of a plain host tensor in C,
    _fastcall_tensor.cc) told what it needs of torch and of this module; returns its entry point,
    allreduce_tensor(tensor, inplace, average, name, compression, op, prescale_factor,
    postscale_factor, process_set) -> the result or NotImplemented; None without the module.
    Its outputs below the output pool's size are tensors over memory of its own, through DLPack
    where torch takes it (_fastcall_outputs.cc), kept for reuse up to 16 blocks of at most 1/16
    of HVD_TORCH_OUTPUT_POOL_BYTES (0: torch.empty_like for every output)."""
    if _fast is None:
        return None
    pool_bytes = _pool.limit()
    try:
        _fast.configure_tensors(
            tensor_type=torch.Tensor, empty_like=torch.empty_like, strided=_STRIDED,
            dtypes=_DTYPES, names=_names, encode_name=_encode_name, ops=_HVD_OPS,
            average_op=_HVD_OPS[Average], no_compression=Compression.none,
            global_set=global_process_set,
            max_new_bytes=_pool.MIN_BYTES if pool_bytes else 1 << 62, check=_b.check,
            table=_h.handle_table(), ids=_h.handle_ids(),
            from_dlpack=getattr(torch._C, "_from_dlpack", None) if pool_bytes else None,
            max_pooled=min(pool_bytes, 16 << 20) // 16)
    except (AttributeError, TypeError):  # a _fastcall.abi3.so older than this file
        return None
    return _fast.allreduce_tensor


def _encode_name(name):
    return _h.op_name("allreduce", name)


_tensor_path = _configure_tensor_path()
_NO_COMPRESSION = Compression.none  # allreduce_ takes no compression


def _reduce_op(op, average):
    """hvd_reduce_op_t for Horovod's op (and its deprecated boolean `average`)."""
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    return _b.hvd_op(op)


def needs_grad(tensor):
    """Whether a result computed from `tensor` needs autograd (it requires a gradient and grad
    mode is on)."""
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


def any_needs_grad(tensors):
    return any(needs_grad(t) for t in tensors)


def compressed_group(tensors, compression, what, differentiable, plain):
    """A grouped operation on `tensors`, each compressed for the transfer: differentiable(*them)
    when a result needs a gradient, else plain(them); returns the results decompressed."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("%s: the list of tensors is empty" % what)
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = differentiable(*compressed) if any_needs_grad(compressed) else plain(compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, ctxs)]


# ---- allreduce ----------------------------------------------------------------------------------

def _allreduce(tensor, inplace, name, op, average, prescale_factor, postscale_factor,
               process_set, sync=False):
    """Enqueues an allreduce of `tensor` (into a new tensor, or in place); (ptr, keep, finish).
    `sync`: returns the result instead, waiting for it at once: the runtime may run it on this
    thread instead of handing it to its background thread and back, and one call
    (hvd_run_allreduce_for) runs it and waits for it (the first 100 ms; then as _h.run).
    Every synchronous allreduce and every gradient takes this path, so the common case (the
    global set, an op given, a contiguous host tensor) is written out here: a 4 KiB operation
    takes about 2 us on two ranks, and each Python-level step here 0.03-0.15 us of it, the
    output's allocation (out of place) about 1 us (docs/performance-api-torch.md)."""
    ps_id = 0 if process_set is global_process_set else _h.set_id(process_set)
    c_op = _HVD_OPS.get(op) if average is None and type(op) is int else None
    if c_op is None:
        c_op = _reduce_op(op, average)  # no op, the deprecated `average`, or an unknown op
    # A dense host tensor of a dtype hvd takes: _h.host_dtype, written out.
    dtype = (_DTYPES.get(tensor.dtype) if isinstance(tensor, _Tensor) and tensor.is_cpu
             and tensor.layout is _STRIDED else None)
    device = -1
    if dtype is None:
        dtype, device = _h.check_tensor(tensor, "allreduce")  # a CUDA tensor, or the error
    # result: what a synchronous call returns once done (None: finish(None, keep) makes it).
    if not inplace:
        src = tensor if tensor.is_contiguous() else tensor.contiguous()
        # Contiguous, as src; a large host output reuses pooled memory (no page faults).
        small = device >= 0 or src.numel() < _SMALL_NUMEL
        out = torch.empty_like(src) if small else _pool.empty_like(src)
        result, keep, finish = out, (out, src), _first
    elif tensor.is_contiguous():
        src = out = result = keep = tensor
        finish = None
    else:
        src, keep, finish = _h.inplace_buffer(tensor)  # a copy, copied back at the end
        out, result = src, None
    # _h.op_name("allreduce", name), its cache looked up here first (no call for a known name).
    c_name = _names.get(name) if type(name) is str else None
    if c_name is None:
        c_name = _h.op_name("allreduce", name)
    if _fast is None:
        return _allreduce_ctypes(src, out, keep, finish, c_name, dtype, device, c_op,
                                 prescale_factor, postscale_factor, ps_id, sync)
    stream = None if device < 0 else _h.stream(device)
    if not sync:
        return (_fast.enqueue_allreduce(c_name, src.data_ptr(), out.data_ptr(), src.shape, dtype,
                                        device, stream, c_op, prescale_factor, postscale_factor,
                                        ps_id), keep, finish)
    pending = [0]  # the handle, set by the call itself while the operation still runs
    try:
        code = _fast.run_allreduce(c_name, src.data_ptr(), out.data_ptr(), src.shape, dtype,
                                   device, stream, c_op, prescale_factor, postscale_factor, ps_id,
                                   _FIRST_WAIT_MS, pending)
        if not pending[0]:  # the runtime has released the operation
            if code == 0:
                return result if result is not None else finish(None, keep)
            raise _error_from_status(code, _last_error(), None)
        code = _wait(pending[0])  # still running after 100 ms: in slices, Ctrl-C is seen
    except BaseException:
        _park_if_running(pending[0], keep, finish)
        raise
    return _h.complete(pending[0], code, keep, finish)


def _allreduce_ctypes(src, out, keep, finish, c_name, dtype, device, c_op, prescale_factor,
                      postscale_factor, ps_id, sync):
    """_allreduce's call through ctypes, where hvd.common._fastcall is missing: descriptors (from
    _h.desc's cache) and ctypes values made ready for the call."""
    d = _h.desc(src, dtype, device)
    out_d = d if out is src else _h.desc(out, dtype, device)
    if not sync:
        return (_enqueue_allreduce(c_name, d, out_d, c_op, prescale_factor, postscale_factor,
                                   ps_id), keep, finish)
    pending = _Pending()
    try:
        code = _run_allreduce_for(
            c_name, _byref(d), _byref(out_d), c_op,
            _ONE if prescale_factor == 1.0 else _c_double(prescale_factor),
            _ONE if postscale_factor == 1.0 else _c_double(postscale_factor), ps_id,
            _FIRST_WAIT_MS_C, _byref(pending))
        if not pending.value:  # the runtime has released the operation
            if code == 0:
                return keep if finish is None else finish(None, keep)
            raise _error_from_status(code, _last_error(), None)
        code = _wait(pending.value)  # still running after 100 ms: in slices, Ctrl-C is seen
    except BaseException:
        _park_if_running(pending.value, keep, finish)
        raise
    return _h.complete(pending.value, code, keep, finish)


def _park_if_running(pending, keep, finish):
    """Interrupted (Ctrl-C, possibly as the call returned) while a synchronous allreduce may still
    write into its buffers (pending: its handle, else None or 0): the handle table keeps them,
    under a handle nobody has, as _h.run does."""
    if pending:
        _h.park(pending, keep, finish)


def _first(ptr, keep):
    return keep[0]


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over the ranks of `process_set` (not modified); returns a handle
    for poll()/synchronize(), whose result is a new tensor. op: Average (default), Sum, Min, Max,
    Product or Adasum; prescale_factor multiplies the input before the reduction and
    postscale_factor the result after it. Every rank must submit the same name, dtype and shape.
    `average` is Horovod's deprecated boolean (True: Average, False: Sum)."""
    return _h.submit(*_allreduce(tensor, False, name, op, average, prescale_factor,
                                 postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, in place: synchronize() returns `tensor` holding the result."""
    return _h.submit(*_allreduce(tensor, True, name, op, average, prescale_factor,
                                 postscale_factor, process_set))


class HorovodAllreduce(torch.autograd.Function):
    """Differentiable allreduce: the gradient is the allreduce of the gradient with the same op
    and scale factors."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return _allreduce(tensor, False, name, op, average, prescale_factor, postscale_factor,
                          process_set, sync=True)

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, average=ctx.average, op=ctx.op,
                         prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return grad, None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over the ranks of `process_set` and returns the result (a new tensor;
    `tensor` is not modified). Differentiable. `compression` (Compression.fp16) compresses the
    tensor for the transfer. See allreduce_async for the other arguments.

    A result may be over memory hvd reuses once torch frees it (that of a contiguous host
    torch.Tensor needing no gradient, made in C, and any of 4 MiB or more): its storage cannot
    grow (resize_ to more elements than it has fails; HVD_TORCH_OUTPUT_POOL_BYTES=0 makes every
    result with torch.empty_like)."""
    if _tensor_path is not None:  # a plain host tensor, all in C
        result = _tensor_path(tensor, False, average, name, compression, op, prescale_factor,
                              postscale_factor, process_set)
        if result is not NotImplemented:
            return result
    plain = compression is Compression.none  # the common case, without two calls that do nothing
    compressed, ctx = (tensor, None) if plain else compression.compress(tensor)
    if getattr(compressed, "requires_grad", False) and torch.is_grad_enabled():
        reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor,
                                         postscale_factor, process_set)
    else:
        reduced = _allreduce(compressed, False, name, op, average, prescale_factor,
                             postscale_factor, process_set, sync=True)
    return reduced if plain else compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    if _tensor_path is not None:  # a plain host tensor, all in C
        result = _tensor_path(tensor, True, average, name, _NO_COMPRESSION, op, prescale_factor,
                              postscale_factor, process_set)
        if result is not NotImplemented:
            return result
    return _allreduce(tensor, True, name, op, average, prescale_factor, postscale_factor,
                      process_set, sync=True)


# ---- grouped allreduce --------------------------------------------------------------------------

def _grouped_allreduce(tensors, inplace, name, op, average, prescale_factor, postscale_factor,
                       process_set):
    """Enqueues an allreduce of a list of tensors as one unit (into new tensors, or in place);
    (ptr, keep, finish)."""
    ps_id = _h.set_id(process_set)
    c_op = _reduce_op(op, average)
    if inplace:
        tensors = list(tensors)
        if not tensors:
            raise ValueError("grouped_allreduce: the list of tensors is empty")
        descs, bufs, finishes = [], [], []
        for i, t in enumerate(tensors):
            dtype, device = _h.check_tensor(t, "grouped_allreduce (tensor %d)" % i)
            d, buf, fin = _h.inplace(t, dtype, device)
            descs.append(d)
            bufs.append(buf)
            finishes.append(fin)
        ins = outs = _h.desc_array(descs)
        results = None
    else:
        tensors, bufs, descs = _h.input_descs(tensors, "grouped_allreduce")
        results = [_pool.empty_like(b, memory_format=torch.contiguous_format) if b.is_cpu
                   else torch.empty_like(b, memory_format=torch.contiguous_format) for b in bufs]
        ins = _h.desc_array(descs)
        outs = _h.desc_array([_h.desc(r, d.dtype, d.device) for r, d in zip(results, descs)])

    def finish(ptr, keep):
        if results is not None:
            return results
        return [t if fin is None else fin(ptr, None) for t, fin in zip(tensors, finishes)]

    ptr = _lib.hvd_enqueue_grouped_allreduce(_h.op_name("grouped_allreduce", name), len(tensors),
                                             ins, outs, c_op, prescale_factor, postscale_factor,
                                             ps_id)
    return ptr, (tensors, bufs, ins, outs), finish


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one unit (negotiated, fused and completed together);
    synchronize() returns a list of new tensors."""
    return _h.submit(*_grouped_allreduce(tensors, False, name, op, average, prescale_factor,
                                         postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """As grouped_allreduce_async, in place: synchronize() returns the tensors."""
    return _h.submit(*_grouped_allreduce(tensors, True, name, op, average, prescale_factor,
                                         postscale_factor, process_set))


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Differentiable grouped allreduce."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        return tuple(_h.run(*_grouped_allreduce(tensors, False, name, op, average,
                                                prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, None) + tuple(grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one unit and returns a list of new tensors. Differentiable."""
    return compressed_group(
        tensors, compression, "grouped_allreduce",
        lambda *ts: HorovodGroupedAllreduce.apply(average, name, op, prescale_factor,
                                                  postscale_factor, process_set, *ts),
        lambda ts: _h.run(*_grouped_allreduce(ts, False, name, op, average, prescale_factor,
                                              postscale_factor, process_set)))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place; returns them."""
    return _h.run(*_grouped_allreduce(tensors, True, name, op, average, prescale_factor,
                                      postscale_factor, process_set))
