"""Horovod's PyTorch collectives (horovod.torch.mpi_ops) over hvd's C ABI.

Every operation is enqueued with an hvd_enqueue_* call and returns an integer handle; poll() and
synchronize() take it. Until synchronize() returns, the handle table keeps everything the runtime
points at alive: input and output tensors, contiguous copies, the hvd_tensor descriptors, their
shape arrays and the name. synchronize() waits in 100 ms slices of hvd_wait_for (the GIL is
released during each, and Ctrl-C is seen between them; an interrupted wait leaves the operation in
the table, so synchronize() may be called again), then releases the runtime's handle exactly once.

Tensors: host (CPU) tensors of dtype uint8, int8, int16, int32, int64, float16, bfloat16, float32,
float64 or bool. Others (complex, quantized...) raise ValueError naming the dtype. Non-contiguous
tensors are copied to contiguous ones (in-place operations copy the result back). CUDA tensors are
passed with their device index; this build of the runtime has no GPU data path and says so.

Names: an explicit name is prefixed with the operation ("allreduce.<name>"), as Horovod does, so
that an allreduce and an allgather may share a user name. Unnamed operations get
"<op>.noname.<n>", counted per process set, so that operations on a subset do not shift the
names of later unnamed operations on other sets.

Errors raised by synchronize() (and by the synchronous functions): see hvd.common.exceptions.
"""
import ctypes
import itertools
import threading

import torch

from hvd.common import basics as _b
from hvd.common.basics import HvdTensor
from hvd.common.exceptions import HorovodInternalError, error_from_status
from hvd.common.process_sets import ProcessSet, global_process_set, add_process_set, \
    remove_process_set  # noqa: F401 (Horovod's mpi_ops exports them)
from hvd.common.util import get_average_backwards_compatibility_fun
from hvd.torch.compression import Compression

_lib = _b.lib

# ---- basics (Horovod's names) -------------------------------------------------------------------

shutdown = _b.shutdown
is_initialized = _b.is_initialized
start_timeline = _b.start_timeline
stop_timeline = _b.stop_timeline
size = _b.size
local_size = _b.local_size
cross_size = _b.cross_size
rank = _b.rank
local_rank = _b.local_rank
cross_rank = _b.cross_rank
is_homogeneous = _b.is_homogeneous
mpi_threads_supported = _b.mpi_threads_supported
mpi_enabled = _b.mpi_enabled
mpi_built = _b.mpi_built
gloo_enabled = _b.gloo_enabled
gloo_built = _b.gloo_built
nccl_built = _b.nccl_built
ddl_built = _b.ddl_built
ccl_built = _b.ccl_built
cuda_built = _b.cuda_built
rocm_built = _b.rocm_built

Average = _b.Average
Sum = _b.Sum
Adasum = _b.Adasum
Min = _b.Min
Max = _b.Max
Product = _b.Product

handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_b)


def init(comm=None, process_sets=None):
    """Initializes hvd; see hvd.common.basics.init (Horovod's hvd.init(comm, process_sets))."""
    _b.init(comm=comm, process_sets=process_sets)


# ---- dtypes, devices, descriptors ---------------------------------------------------------------

# torch dtype -> hvd_dtype_t (c_api.h)
_DTYPES = {
    torch.float32: 0,
    torch.float64: 1,
    torch.float16: 2,
    torch.bfloat16: 3,
    torch.int8: 4,
    torch.uint8: 5,
    torch.int32: 6,
    torch.int64: 7,
    torch.int16: 8,
    torch.bool: 9,
}
_SUPPORTED = "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool"


def _check_tensor(tensor, what):
    """(hvd dtype, device) of a tensor the runtime can take, or a clear error."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.layout != torch.strided:
        raise ValueError("%s: %s tensors are not supported (dense tensors only; for sparse "
                         "gradients use sparse_allreduce_async or sparse_as_dense=True)"
                         % (what, tensor.layout))
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ValueError("%s: tensor dtype %s is not supported by hvd (supported: %s)"
                         % (what, tensor.dtype, _SUPPORTED))
    dev = tensor.device
    if dev.type == "cpu":
        device = -1
    elif dev.type == "cuda":
        device = dev.index if dev.index is not None else 0
    else:
        raise ValueError("%s: the tensor is on device '%s'; hvd reduces host (CPU) tensors"
                         % (what, dev))
    return dtype, device


class _Desc:
    """An hvd_tensor describing a contiguous tensor, with the shape array it points to."""
    __slots__ = ("tensor", "shape", "struct")

    def __init__(self, tensor, dtype, device):
        self.tensor = tensor
        dims = list(tensor.shape)
        self.shape = (ctypes.c_int64 * max(1, len(dims)))(*dims)
        self.struct = HvdTensor(tensor.data_ptr() or None, self.shape, len(dims), dtype, device,
                                0, None)

    def ref(self):
        return ctypes.byref(self.struct)


def _desc_array(descs):
    arr = (HvdTensor * max(1, len(descs)))()
    for i, d in enumerate(descs):
        arr[i] = d.struct
    return arr


def _contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _inplace(tensor, dtype, device):
    """The buffer an in-place operation on `tensor` works in, and the function that returns the
    result (copying it back when `tensor` is not contiguous)."""
    if tensor.is_contiguous():
        return _Desc(tensor, dtype, device), (lambda: tensor)
    buf = tensor.contiguous()

    def copy_back():
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor

    return _Desc(buf, dtype, device), copy_back


def _process_set_id(process_set):
    ps_id = getattr(process_set, "process_set_id", None)
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be an hvd.ProcessSet, not %s"
                        % type(process_set).__name__)
    if ps_id is None:
        raise ValueError("%s is not registered: pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set() first (or it was removed)" % process_set)
    return ps_id


def _set_size(process_set):
    return size() if process_set.process_set_id == 0 else process_set.size()


def _set_rank(process_set):
    return rank() if process_set.process_set_id == 0 else process_set.rank()


# ---- names --------------------------------------------------------------------------------------

_noname = {}
_noname_lock = threading.Lock()


def _op_name(kind, name, ps_id):
    if name is None or name == "":
        with _noname_lock:
            n = _noname.get(ps_id, 0)
            _noname[ps_id] = n + 1
        text = "%s.noname.%d" % (kind, n) if ps_id == 0 else "%s.noname.set%d.%d" % (kind, ps_id, n)
    else:
        text = "%s.%s" % (kind, name)
    return text.encode("utf-8")


# ---- the handle table ---------------------------------------------------------------------------

class _Op:
    __slots__ = ("ptr", "keep", "finish", "aux")

    def __init__(self, ptr, keep, finish):
        self.ptr = ptr
        self.keep = keep        # everything the runtime points at, alive until completion
        self.finish = finish    # finish(op) -> the operation's result; called once, on success
        self.aux = None         # extra results for the autograd functions (e.g. splits)


_handle_map = {}
_handle_ids = itertools.count(1)


def _submit(ptr, keep, finish):
    if not ptr:
        raise HorovodInternalError("hvd returned no handle (out of memory?)")
    handle = next(_handle_ids)
    _handle_map[handle] = _Op(ptr, keep, finish)
    return handle


def _complete(handle):
    """Waits for `handle`, returns (result, op); (None, None) for an unknown handle."""
    op = _handle_map.pop(handle, None)
    if op is None:
        return None, None
    try:
        code, msg = _b.wait(op.ptr)
    except BaseException:
        # Interrupted (Ctrl-C): the operation may still write into its buffers. Keep it.
        _handle_map[handle] = op
        raise
    try:
        if code != 0:
            raise error_from_status(code, msg)
        return op.finish(op), op
    finally:
        _lib.hvd_release(op.ptr)
        op.keep = None


def poll(handle):
    """True when the asynchronous operation behind `handle` has completed (synchronize() will not
    block)."""
    if callable(handle):
        return True
    op = _handle_map.get(handle)
    if op is None:
        raise ValueError("Handle %r was not created or has been cleared." % (handle,))
    return bool(_lib.hvd_poll(op.ptr))


def synchronize(handle):
    """Waits for an asynchronous operation and returns its result: the output tensor (a list for
    grouped operations, (output, received_splits) for alltoall). Raises the operation's error
    (HorovodInternalError when the collective failed). None for an unknown handle, as Horovod."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle()
    result, _ = _complete(handle)
    return result


def _reset_handles():
    """After init: drop what a previous session left (completed) in the table."""
    for h, op in list(_handle_map.items()):
        if _lib.hvd_poll(op.ptr):
            _handle_map.pop(h, None)
            _lib.hvd_release(op.ptr)
    with _noname_lock:
        _noname.clear()


_b.add_init_hook(_reset_handles)


def _output(op, i, torch_dtype):
    """Result i owned by the runtime's handle (allgather, alltoall, reducescatter) as a tensor."""
    ptr = op.ptr
    ndim = _lib.hvd_handle_output_shape_at(ptr, i, None, 0)
    dims = (ctypes.c_int64 * max(1, ndim))()
    _lib.hvd_handle_output_shape_at(ptr, i, dims, ndim)
    out = torch.empty([int(d) for d in dims[:ndim]], dtype=torch_dtype)
    nbytes = ctypes.c_size_t(0)
    data = _lib.hvd_handle_output_at(ptr, i, ctypes.byref(nbytes))
    want = out.numel() * out.element_size()
    if nbytes.value != want:
        raise HorovodInternalError("hvd: result %d holds %d bytes, its shape %s needs %d"
                                   % (i, nbytes.value, list(out.shape), want))
    if want:
        ctypes.memmove(out.data_ptr(), data, want)
    return out


def _splits(op, i):
    n = _lib.hvd_handle_output_splits(op.ptr, i, None, 0)
    arr = (ctypes.c_int64 * max(1, n))()
    _lib.hvd_handle_output_splits(op.ptr, i, arr, n)
    return [int(x) for x in arr[:n]]


def _blocking(fn, *args):
    """Runs a blocking C call on a helper thread so that Ctrl-C still reaches this one; returns
    (status code, message)."""
    result = {}

    def run():
        code = fn(*args)
        result["code"] = code
        result["msg"] = _b.last_error() if code != 0 else ""  # thread-local: read it here

    t = threading.Thread(target=run, name="hvd-blocking-call", daemon=True)
    t.start()
    while t.is_alive():
        t.join(0.1)
    return result["code"], result["msg"]


# ---- allreduce ----------------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """output None: out of place; output is tensor: in place."""
    ps_id = _process_set_id(process_set)
    c_op = _b.hvd_op(op)
    dtype, device = _check_tensor(tensor, "allreduce")
    if output is None:
        src = _contiguous(tensor)
        out = torch.empty_like(src, memory_format=torch.contiguous_format)
        in_d, out_d = _Desc(src, dtype, device), _Desc(out, dtype, device)
        result = lambda: out  # noqa: E731
    else:
        in_d, result = _inplace(tensor, dtype, device)
        out_d = in_d
    cname = _op_name("allreduce", name, ps_id)
    ptr = _lib.hvd_enqueue_allreduce(cname, in_d.ref(), out_d.ref(), c_op, float(prescale_factor),
                                     float(postscale_factor), ps_id)
    return _submit(ptr, (tensor, in_d, out_d, cname), lambda o: result())


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over the ranks of `process_set` (not modified); returns a handle
    for poll()/synchronize(), whose result is a new tensor. op: Average (default), Sum, Min, Max,
    Product or Adasum; prescale_factor multiplies the input before the reduction and
    postscale_factor the result after it. Every rank must submit the same name, dtype and shape.
    `average` is Horovod's deprecated boolean (True: Average, False: Sum)."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, None, name, op, prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, in place: synchronize() returns `tensor` holding the result."""
    op = handle_average_backwards_compatibility(op, average)
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set)


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
        handle = allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor,
                                 process_set)
        return synchronize(handle)

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
    tensor for the transfer. See allreduce_async for the other arguments."""
    tensor_compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(tensor_compressed, average, name, op, prescale_factor,
                                     postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` in place and returns it."""
    handle = allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                              process_set)
    return synchronize(handle)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    """outputs None: out of place; outputs is tensors: in place."""
    ps_id = _process_set_id(process_set)
    c_op = _b.hvd_op(op)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce: the list of tensors is empty")
    in_descs, out_descs, results = [], [], []
    for i, t in enumerate(tensors):
        dtype, device = _check_tensor(t, "grouped_allreduce (tensor %d)" % i)
        if outputs is None:
            src = _contiguous(t)
            out = torch.empty_like(src, memory_format=torch.contiguous_format)
            in_descs.append(_Desc(src, dtype, device))
            out_descs.append(_Desc(out, dtype, device))
            results.append(lambda out=out: out)
        else:
            d, result = _inplace(t, dtype, device)
            in_descs.append(d)
            out_descs.append(d)
            results.append(result)
    ins, outs = _desc_array(in_descs), _desc_array(out_descs)
    cname = _op_name("grouped_allreduce", name, ps_id)
    ptr = _lib.hvd_enqueue_grouped_allreduce(cname, len(tensors), ins, outs, c_op,
                                             float(prescale_factor), float(postscale_factor),
                                             ps_id)
    return _submit(ptr, (tensors, in_descs, out_descs, ins, outs, cname),
                   lambda o: [r() for r in results])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing a list of tensors as one unit (negotiated, fused and completed together);
    synchronize() returns a list of new tensors."""
    op = handle_average_backwards_compatibility(op, average)
    return _grouped_allreduce_async(tensors, None, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """As grouped_allreduce_async, in place: synchronize() returns the tensors."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = list(tensors)
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor,
                                    process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """Differentiable grouped allreduce."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average = average
        ctx.op = op
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        ctx.process_set = process_set
        handle = grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                         postscale_factor, process_set)
        return tuple(synchronize(handle))

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
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allreduce: the list of tensors is empty")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                            process_set, *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, ctxs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors in place; returns them."""
    handle = grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                      postscale_factor, process_set)
    return synchronize(handle)


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
            values = values / _set_size(process_set)
        if indices.dim() == 0 or values.dim() == 0:
            return torch.sparse_coo_tensor(size=t.size(), dtype=t.dtype)
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size())

    return handle


# ---- allgather ----------------------------------------------------------------------------------

def _allgather_async(tensor, name, process_set):
    ps_id = _process_set_id(process_set)
    dtype, device = _check_tensor(tensor, "allgather")
    d = _Desc(_contiguous(tensor), dtype, device)
    cname = _op_name("allgather", name, ps_id)
    ptr = _lib.hvd_enqueue_allgather(cname, d.ref(), ps_id)

    def finish(op):
        op.aux = _splits(op, 0)
        return _output(op, 0, tensor.dtype)

    return _submit(ptr, (tensor, d, cname), finish)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's `tensor` along the first dimension (which may differ
    between ranks; the others must agree); synchronize() returns the concatenation."""
    return _allgather_async(tensor, name, process_set)


class HorovodAllgather(torch.autograd.Function):
    """Differentiable allgather. As Horovod, the gradient is this rank's rows of the gradient
    averaged over the set's ranks."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0] if tensor.dim() > 0 else 0
        ctx.process_set = process_set
        output, op = _complete(allgather_async(tensor, name, process_set))
        ctx.splits = op.aux
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        offset = sum(ctx.splits[:_set_rank(ctx.process_set)])
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along the first dimension and returns the result
    (`tensor` is not modified). Differentiable."""
    return HorovodAllgather.apply(tensor, name, process_set)


def _grouped_allgather_async(tensors, name, process_set):
    ps_id = _process_set_id(process_set)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather: the list of tensors is empty")
    descs = []
    for i, t in enumerate(tensors):
        dtype, device = _check_tensor(t, "grouped_allgather (tensor %d)" % i)
        descs.append(_Desc(_contiguous(t), dtype, device))
    arr = _desc_array(descs)
    cname = _op_name("grouped_allgather", name, ps_id)
    ptr = _lib.hvd_enqueue_grouped_allgather(cname, len(tensors), arr, ps_id)

    def finish(op):
        op.aux = [_splits(op, i) for i in range(len(tensors))]
        return [_output(op, i, t.dtype) for i, t in enumerate(tensors)]

    return _submit(ptr, (tensors, descs, arr, cname), finish)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts allgathering a list of tensors as one unit; synchronize() returns a list."""
    return _grouped_allgather_async(tensors, name, process_set)


class HorovodGroupedAllgather(torch.autograd.Function):
    """Differentiable grouped allgather (gradients as HorovodAllgather's)."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() > 0 else 0 for t in tensors]
        ctx.process_set = process_set
        outputs, op = _complete(grouped_allgather_async(list(tensors), name, process_set))
        ctx.splits = op.aux
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_output):
        handles = [allreduce_async(g, op=Average, process_set=ctx.process_set)
                   for g in grad_output]
        reduced = [synchronize(h) for h in handles]
        r = _set_rank(ctx.process_set)
        grads = [g.narrow(0, sum(s[:r]), d) for g, s, d in zip(reduced, ctx.splits, ctx.dims)]
        return (None, None) + tuple(grads)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors as one unit; returns a list. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather: the list of tensors is empty")
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---- broadcast ----------------------------------------------------------------------------------

def _broadcast_async(tensor, inplace, root_rank, name, process_set):
    ps_id = _process_set_id(process_set)
    dtype, device = _check_tensor(tensor, "broadcast")
    if inplace:
        d, result = _inplace(tensor, dtype, device)
    else:
        out = tensor.clone(memory_format=torch.contiguous_format)
        d = _Desc(out, dtype, device)
        result = lambda: out  # noqa: E731
    cname = _op_name("broadcast", name, ps_id)
    ptr = _lib.hvd_enqueue_broadcast(cname, d.ref(), int(root_rank), ps_id)
    return _submit(ptr, (tensor, d, cname), lambda o: result())


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying `tensor` of rank `root_rank` (a job rank, member of the set) to every rank
    of the set; synchronize() returns a new tensor (`tensor` is not modified)."""
    return _broadcast_async(tensor, False, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """As broadcast_async, in place: synchronize() returns `tensor` holding the root's values."""
    return _broadcast_async(tensor, True, root_rank, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    """Differentiable broadcast. As Horovod, the gradient is the gradient averaged over the set's
    ranks on the root, and zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced = grad_reduced * 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns `tensor` as it is on `root_rank` (a new tensor). Differentiable."""
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with its value on `root_rank`; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall -----------------------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending splits[i] first-dimension rows of `tensor` to the set's i-th rank (splits:
    a list or integer tensor with one entry per rank of the set; None divides the first dimension
    evenly). synchronize() returns (output, received_splits): the rows received, concatenated in
    rank order, and how many came from each rank (int32, or the dtype of a `splits` tensor)."""
    ps_id = _process_set_id(process_set)
    dtype, device = _check_tensor(tensor, "alltoall")
    splits_dtype = torch.int32
    arr, n = None, 0
    if splits is not None:
        if isinstance(splits, torch.Tensor):
            splits_dtype = splits.dtype
            values = [int(x) for x in splits.reshape(-1).tolist()]
        else:
            values = [int(x) for x in splits]
        if values:
            arr, n = (ctypes.c_int64 * len(values))(*values), len(values)
    d = _Desc(_contiguous(tensor), dtype, device)
    cname = _op_name("alltoall", name, ps_id)
    ptr = _lib.hvd_enqueue_alltoall(cname, d.ref(), arr, n, ps_id)

    def finish(op):
        received = torch.tensor(_splits(op, 0), dtype=splits_dtype)
        return _output(op, 0, tensor.dtype), received

    return _submit(ptr, (tensor, d, arr, cname), finish)


class HorovodAlltoall(torch.autograd.Function):
    """Differentiable alltoall: the gradient goes back with an alltoall by the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad, _ = alltoall(grad_output, splits=ctx.recvsplits, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[i] rows of `tensor` to the set's i-th rank and returns what this rank received,
    as Horovod: the output tensor when `splits` is None (even division), else the pair
    (output, received_splits). Differentiable."""
    return HorovodAlltoall.apply(tensor, splits, name, process_set)


# ---- reducescatter ------------------------------------------------------------------------------

def _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor):
    ps_id = _process_set_id(process_set)
    c_op = _b.hvd_op(op)
    dtype, device = _check_tensor(tensor, "reducescatter")
    d = _Desc(_contiguous(tensor), dtype, device)
    cname = _op_name("reducescatter", name, ps_id)
    ptr = _lib.hvd_enqueue_reducescatter(cname, d.ref(), c_op, float(prescale_factor),
                                         float(postscale_factor), ps_id)
    return _submit(ptr, (tensor, d, cname), lambda op_: _output(op_, 0, tensor.dtype))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing `tensor` over the set (op: Average or Sum) and scattering the result along
    the first dimension: rank i of the set gets the i-th share (shares as even as possible, lower
    ranks taking one extra row). synchronize() returns this rank's share."""
    return _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)


def _reducescatter_grad(grad, ctx):
    scale = float(ctx.prescale_factor) * float(ctx.postscale_factor)
    if ctx.op == Sum:
        scale *= _set_size(ctx.process_set)
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
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(_reducescatter_grad(grad_output, ctx), process_set=ctx.process_set)
        return grad, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set and returns this rank's share of the first dimension.
    Differentiable."""
    tensor_compressed, ctx = compression.compress(tensor)
    out = HorovodReducescatter.apply(tensor_compressed, name, op, process_set, prescale_factor,
                                     postscale_factor)
    return compression.decompress(out, ctx)


def _grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                 postscale_factor):
    ps_id = _process_set_id(process_set)
    c_op = _b.hvd_op(op)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_reducescatter: the list of tensors is empty")
    descs = []
    for i, t in enumerate(tensors):
        dtype, device = _check_tensor(t, "grouped_reducescatter (tensor %d)" % i)
        descs.append(_Desc(_contiguous(t), dtype, device))
    arr = _desc_array(descs)
    cname = _op_name("grouped_reducescatter", name, ps_id)
    ptr = _lib.hvd_enqueue_grouped_reducescatter(cname, len(tensors), arr, c_op,
                                                 float(prescale_factor), float(postscale_factor),
                                                 ps_id)
    return _submit(ptr, (tensors, descs, arr, cname),
                   lambda op_: [_output(op_, i, t.dtype) for i, t in enumerate(tensors)])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducescattering a list of tensors as one unit; synchronize() returns a list."""
    return _grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                        postscale_factor)


class HorovodGroupedReducescatter(torch.autograd.Function):
    """Differentiable grouped reducescatter (gradients as HorovodReducescatter's)."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op = op
        ctx.process_set = process_set
        ctx.prescale_factor = prescale_factor
        ctx.postscale_factor = postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        handles = [allgather_async(_reducescatter_grad(g, ctx), process_set=ctx.process_set)
                   for g in grad_output]
        return (None, None, None, None, None) + tuple(synchronize(h) for h in handles)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of tensors as one unit; returns a list. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_reducescatter: the list of tensors is empty")
    compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
    outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                             postscale_factor, *compressed)
    return [compression.decompress(t, c) for t, c in zip(outs, ctxs)]


# ---- bytes (object collectives) -----------------------------------------------------------------

def _broadcast_bytes(data, root_rank, name, process_set):
    """`data` of rank `root_rank` on every rank of the set (other ranks' `data` is ignored)."""
    ps_id = _process_set_id(process_set)
    is_root = rank() == root_rank
    buf = ctypes.create_string_buffer(bytes(data), len(data)) if is_root and data else None
    cname = _op_name("broadcast_object", name, ps_id)
    ptr = _lib.hvd_enqueue_broadcast_bytes(cname, buf, len(data) if is_root else 0,
                                           int(root_rank), ps_id)

    def finish(op):
        if is_root:
            return bytes(data)
        nbytes = ctypes.c_size_t(0)
        p = _lib.hvd_handle_output_at(op.ptr, 0, ctypes.byref(nbytes))
        return ctypes.string_at(p, nbytes.value) if nbytes.value else b""

    return synchronize(_submit(ptr, (buf, cname), finish))


def _allgather_bytes(data, name, process_set):
    """Every rank's `data` (bytes of any length), in the set's rank order."""
    ps_id = _process_set_id(process_set)
    buf = ctypes.create_string_buffer(bytes(data), len(data)) if data else None
    cname = _op_name("allgather_object", name, ps_id)
    ptr = _lib.hvd_enqueue_allgather_bytes(cname, buf, len(data), ps_id)

    def finish(op):
        counts = _splits(op, 0)
        nbytes = ctypes.c_size_t(0)
        p = _lib.hvd_handle_output_at(op.ptr, 0, ctypes.byref(nbytes))
        blob = ctypes.string_at(p, nbytes.value) if nbytes.value else b""
        out, at = [], 0
        for c in counts:
            out.append(blob[at:at + c])
            at += c
        return out

    return synchronize(_submit(ptr, (buf, cname), finish))


# ---- join, barrier ------------------------------------------------------------------------------

def join(device=-1):
    """Tells the other ranks this rank has run out of data and waits until every rank has joined;
    meanwhile this rank takes part in the others' collectives (contributing zeros to allreduces,
    which then average over the ranks that contributed). Returns the rank that joined last.
    `device` is accepted for Horovod's signature (this build works on host memory)."""
    last = ctypes.c_int(-1)
    code, msg = _blocking(_lib.hvd_process_set_join, 0, ctypes.byref(last))
    if code != 0:
        raise error_from_status(code, msg, "hvd.join")
    return int(last.value)


def barrier(process_set=global_process_set):
    """Returns once every rank of `process_set` has called barrier()."""
    ps_id = _process_set_id(process_set)
    code, msg = _blocking(_lib.hvd_process_set_barrier, ps_id)
    if code != 0:
        raise error_from_status(code, msg, "hvd.barrier")
