"""What every hvd.torch collective is made of: tensor checks and hvd_tensor descriptors, names,
process set ids, the handle table, waiting, results owned by the runtime, join and barrier.

An operation is enqueued by a function that returns (ptr, keep, finish): the runtime's handle
(from hvd_enqueue_*), everything the runtime points at until the operation completes (input and
output tensors, contiguous copies, descriptor arrays), and finish(ptr, keep), which makes the
result once the operation has succeeded (None: the result is keep itself). submit() puts them in
the handle table and returns an integer handle for poll() and synchronize(); run() waits for them
at once, without the table (the synchronous functions). Either way the runtime's handle is
released exactly once, after finish.

Waiting (hvd.common.basics.wait) releases the GIL, in 100 ms slices of hvd_wait_for so that
Ctrl-C is seen between them: an interrupted operation stays in the table (its buffers may still be
written) and synchronize() may be called again.

CUDA tensors: a descriptor names the tensor's device and torch's current stream on it (the caller's
work that produced the data); outputs are made on the input's device. Results the runtime owns
(allgather, alltoall, reducescatter) are device memory of the runtime's where the process set runs
NCCL (the returned tensor views it, without a copy, and keeps it alive), else host memory copied to
the input's device (output()). The runtime completes an operation only after its device work has
finished.
"""
import ctypes
import itertools
import operator

import torch

from hvd.common import basics as _b
from hvd.common.basics import HvdTensor
from hvd.common.exceptions import DEADLINE_EXCEEDED, HorovodInternalError, error_from_status
from hvd.common.process_sets import ProcessSet, global_process_set
from hvd.torch import _output_pool as _pool

_lib = _b.lib
_wait = _b.wait
_wait_for = _lib.hvd_wait_for
_release = _lib.hvd_release

# ---- tensors ------------------------------------------------------------------------------------

# torch dtype -> hvd_dtype_t (c_api.h)
DTYPES = {
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
_ITEMSIZE = {dt: torch.empty((), dtype=dt).element_size() for dt in DTYPES}
_SUPPORTED = "uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool"
_STRIDED = torch.strided


def host_dtype(tensor):
    """The hvd dtype of a dense host tensor of a dtype hvd takes; None for anything else
    (check_tensor says what)."""
    if isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout is _STRIDED:
        return DTYPES.get(tensor.dtype)
    return None


def root_index(root_rank, what):
    """`root_rank` as the int the C ABI takes. TypeError for what is not an integer (1.0, "1"), as
    Horovod's binding (pybind11) refuses it; int(1.5) would silently name rank 1."""
    try:
        return operator.index(root_rank)
    except TypeError:
        raise TypeError("%s: root_rank must be an integer (a job rank), got %s %r"
                        % (what, type(root_rank).__name__, root_rank)) from None


def check_tensor(tensor, what):
    """(hvd dtype, device) of a tensor the runtime can take (device -1: host memory, else the CUDA
    device index), or a clear error."""
    dtype = host_dtype(tensor)
    if dtype is not None:
        return dtype, -1
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s: expected a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.layout != _STRIDED:
        raise ValueError("%s: %s tensors are not supported (dense tensors only; for sparse "
                         "gradients use sparse_allreduce_async or sparse_as_dense=True)"
                         % (what, tensor.layout))
    dtype = DTYPES.get(tensor.dtype)
    if dtype is None:
        raise ValueError("%s: tensor dtype %s is not supported by hvd (supported: %s)"
                         % (what, tensor.dtype, _SUPPORTED))
    dev = tensor.device
    if dev.type == "cuda":
        return dtype, (dev.index if dev.index is not None else torch.cuda.current_device())
    if dev.type == "cpu":
        return dtype, -1
    raise ValueError("%s: the tensor is on device '%s'; hvd takes host (CPU) and CUDA tensors"
                     % (what, dev))


def device_of(device):
    """The torch.device of an hvd device index (-1: the host)."""
    return _CPU if device < 0 else torch.device("cuda", device)


def stream(device):
    """The cudaStream_t (an int; None for the host) the caller's work on `device` runs on: torch's
    current stream there. The runtime orders its work after this stream with an event, and
    completes the operation only once its own device work is finished, so the results are then
    ready for any stream."""
    if device < 0:
        return None
    try:
        return torch.cuda.current_stream(device).cuda_stream
    except (AssertionError, RuntimeError):
        # A torch without CUDA (or no such device): no tensor of it can be on a GPU, so only a
        # hand-made descriptor gets here; the runtime then says why it cannot take it.
        return None


_CPU = torch.device("cpu")


def contiguous(tensor):
    return tensor if tensor.is_contiguous() else tensor.contiguous()


# The runtime copies a descriptor (and its shape) when the operation is enqueued; the data it
# points at must stay valid until completion. A descriptor holds (data pointer, dtype, device,
# shape, stream) alone and never changes once made, so one made earlier for the same values serves
# again: a training loop reduces the same gradient buffers every step, and the allocator hands
# results the same few addresses again and again. Making a ctypes struct and shape array costs
# several microseconds of an operation's latency (far more than it does in a tight loop); finding
# one costs a dict lookup. The cache is emptied when it grows large.
_descs = {}
_DESCS_MAX = 4096
_SHAPE_TYPES = [ctypes.c_int64 * max(1, n) for n in range(9)]


def desc(tensor, dtype, device):
    """The hvd_tensor describing contiguous `tensor`, made earlier when it can be. A device tensor's
    descriptor names the stream current now (the one that produced the data, for the caller)."""
    key = (tensor.data_ptr(), dtype, device, tensor.shape,
           None if device < 0 else stream(device))
    d = _descs.get(key)
    if d is None:
        shape = key[3]
        n = len(shape)
        shape_type = _SHAPE_TYPES[n] if n < len(_SHAPE_TYPES) else ctypes.c_int64 * n
        d = HvdTensor(key[0], shape_type(*shape), n, dtype, device, 0, key[4])
        if len(_descs) >= _DESCS_MAX:
            _descs.clear()
        _descs[key] = d
    return d


def int64_array(values):
    return (ctypes.c_int64 * max(1, len(values)))(*values)


def desc_array(descs):
    """The descriptors as one C array (grouped operations)."""
    return (HvdTensor * max(1, len(descs)))(*descs)


def input_descs(tensors, what):
    """(the tensors as a list, their contiguous buffers, their descriptors) for a grouped
    operation's inputs; ValueError for an empty list."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("%s: the list of tensors is empty" % what)
    bufs, descs = [], []
    for i, t in enumerate(tensors):
        label = "%s (tensor %d)" % (what, i) if len(tensors) > 1 else what
        dtype, device = check_tensor(t, label)
        buf = contiguous(t)
        bufs.append(buf)
        descs.append(desc(buf, dtype, device))
    return tensors, bufs, descs


def inplace(tensor, dtype, device):
    """(descriptor, keep, finish) for an in-place operation on `tensor`: its own buffer (finish
    None: the result is keep, `tensor`), or a contiguous copy whose result finish copies back."""
    buf, keep, finish = inplace_buffer(tensor)
    return desc(buf, dtype, device), keep, finish


def _overlaps(tensor):
    """Whether elements of `tensor` share memory (an expanded tensor: stride 0)."""
    has = getattr(torch, "_debug_has_internal_overlap", None)
    if has is not None:
        return has(tensor) == 1  # 0: no, 1: yes, 2: too hard to tell
    return any(st == 0 and n > 1 for st, n in zip(tensor.stride(), tensor.shape))


def inplace_buffer(tensor):
    """(buffer, keep, finish) for an in-place operation on `tensor`: as inplace(), with the
    contiguous buffer the runtime works in instead of its descriptor."""
    if tensor.is_contiguous():
        return tensor, tensor, None  # the result is `tensor` itself
    if _overlaps(tensor):
        # Checked before anything is submitted: the copy back would fail after the collective.
        raise ValueError("an in-place operation needs a tensor whose elements each have memory of "
                         "their own; this one (shape %s, strides %s) shares memory between "
                         "elements (made by expand()?): pass tensor.clone(), or use the "
                         "out-of-place form" % (list(tensor.shape), list(tensor.stride())))
    buf = tensor.contiguous()

    def copy_back(ptr, keep):
        with torch.no_grad():
            tensor.copy_(buf)
        return tensor

    return buf, buf, copy_back


# ---- names and process sets ---------------------------------------------------------------------

# kind -> {str name: the encoded name}: a training loop names the same tensors every step.
_names = {}
_NAMES_MAX = 4096  # names cached per kind at most


def names(kind):
    """op_name's cache for `kind` ({str name: encoded name}), for a hot path to look a name up in
    before calling op_name."""
    return _names.setdefault(kind, {})


def _encode_name(kind, name):
    encoded = ("%s.%s" % (kind, name)).encode("utf-8")
    if b"\0" in encoded:  # the C side reads up to it: 'a\0x' and 'a\0y' were both 'a'
        raise ValueError("name %r contains a NUL character; operation names are C strings"
                         % (name,))
    return encoded


def op_name(kind, name):
    """The runtime's name for an operation: a given name prefixed with the operation, as Horovod
    does ("allreduce.grad.fc1"), so that an allgather and an allreduce may share a user name; None
    for no name: the runtime numbers unnamed operations per process set ("allreduce.noname.7")."""
    if name is None or name == "":
        return None
    if type(name) is not str:  # (not cached: True and 1 are equal keys)
        return _encode_name(kind, name)
    cache = names(kind)
    encoded = cache.get(name)
    if encoded is None:
        encoded = _encode_name(kind, name)
        if len(cache) >= _NAMES_MAX:
            cache.clear()
        cache[name] = encoded
    return encoded


def set_id(process_set):
    if process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be an hvd.ProcessSet, not %s"
                        % type(process_set).__name__)
    ps_id = process_set.process_set_id
    if ps_id is None:
        raise ValueError("%s is not registered: pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set() first (or it was removed, or hvd was shut down "
                         "since it was registered: sets are numbered afresh by each hvd.init())"
                         % process_set)
    return ps_id


def set_size(process_set):
    return _b.size() if process_set.process_set_id == 0 else process_set.size()


def set_rank(process_set):
    return _b.rank() if process_set.process_set_id == 0 else process_set.rank()


# ---- the handle table ---------------------------------------------------------------------------

# handle -> (ptr, keep, finish): the runtime's handle, what must stay alive until the operation
# completes, and finish(ptr, keep) -> the result (called once, on success; None: the result is keep)
_table = {}
_ids = itertools.count(1)


def handle_table():
    """The table itself, for hvd.common._fastcall's tensor path to park an interrupted operation
    in (with handle_ids()' next handle), as park() does."""
    return _table


def handle_ids():
    return _ids


def _no_handle():
    return HorovodInternalError("hvd returned no handle (out of memory?)")


def submit(ptr, keep, finish):
    """Puts an enqueued operation in the handle table; returns its handle."""
    if not ptr:
        raise _no_handle()
    if not _b.initialized_here and not _b.is_initialized():
        # Before hvd.init(), Horovod's asynchronous calls raise at once, not at synchronize():
        # the runtime completed this operation with that error already.
        result = run(ptr, keep, finish)
        return lambda: result
    handle = next(_ids)
    _table[handle] = (ptr, keep, finish)
    return handle


def complete(ptr, code, keep, finish, context=None):
    """The result of a completed operation (or its error); releases the runtime's handle."""
    if code:
        msg = _b.last_error()
        _release(ptr)
        raise error_from_status(code, msg, context)
    if finish is None:
        _release(ptr)
        return keep
    try:
        return finish(ptr, keep)
    finally:
        _release(ptr)


def park(ptr, keep, finish):
    """Keeps an operation interrupted while it runs (its buffers may still be written) in the
    table, under a handle nobody has."""
    _table[next(_ids)] = (ptr, keep, finish)


def run(ptr, keep, finish, context=None):
    """Waits for an enqueued operation and returns its result (the synchronous functions)."""
    if not ptr:
        raise _no_handle()
    try:
        code = _wait_for(ptr, 100)  # the usual case: complete within the first slice
        if code == DEADLINE_EXCEEDED:
            code = _wait(ptr)
    except BaseException:
        # Interrupted (Ctrl-C): the operation may still write into its buffers.
        park(ptr, keep, finish)
        raise
    if not code and finish is None:  # an in-place result, the commonest: one call less
        _release(ptr)
        return keep
    return complete(ptr, code, keep, finish, context)


def poll(handle):
    """True when the asynchronous operation behind `handle` has completed (synchronize() will not
    block)."""
    if callable(handle):
        return True
    op = _table.get(handle)
    if op is None:
        raise ValueError("Handle %r was not created or has been cleared." % (handle,))
    return bool(_lib.hvd_poll(op[0]))


def synchronize(handle):
    """Waits for an asynchronous operation and returns its result: the output tensor (a list for
    grouped operations, (output, received_splits) for alltoall). Raises the operation's error
    (HorovodInternalError when the collective failed). None for an unknown handle, as Horovod."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle()
    op = _table.pop(handle, None)
    if op is None:
        return None
    ptr, keep, finish = op
    try:
        code = _wait(ptr)
    except BaseException:
        _table[handle] = op  # interrupted: keep it, synchronize() may be called again
        raise
    return complete(ptr, code, keep, finish, None)


def _reset_handles():
    """After init: drop what a previous session left (completed) in the table, and descriptors."""
    for h, (ptr, _, _) in list(_table.items()):
        if _lib.hvd_poll(ptr):
            _table.pop(h, None)
            _release(ptr)
    _descs.clear()


_b.add_init_hook(_reset_handles)


# ---- results owned by the runtime ---------------------------------------------------------------

def output(ptr, i, torch_dtype, device=-1):
    """Result i owned by the runtime's handle (allgather, alltoall, reducescatter) as a tensor on
    `device` (the input's). A result on the device (NCCL) is viewed in place: the tensor holds a
    reference of its own to the runtime's handle, and the runtime frees the memory once the tensor
    is gone, in order after the stream the operation was submitted on (torch's current stream
    then; use the result on another stream only after syncing with that one, as for any tensor
    there). A result in host memory is copied into a host tensor (the handle is released after
    finish), then to the device with a blocking copy on the current stream: the host tensor is
    pageable, and a non-blocking copy is safe only from pinned memory."""
    ndim = _lib.hvd_handle_output_shape_at(ptr, i, None, 0)
    dims = (ctypes.c_int64 * max(1, ndim))()
    _lib.hvd_handle_output_shape_at(ptr, i, dims, ndim)
    shape = dims[:ndim]
    nbytes = ctypes.c_size_t(0)
    data = _lib.hvd_handle_output_at(ptr, i, ctypes.byref(nbytes))
    numel = 1
    for d in shape:
        numel *= d
    want = numel * _ITEMSIZE[torch_dtype]
    if nbytes.value != want:
        raise HorovodInternalError("hvd: result %d holds %d bytes, its shape %s needs %d"
                                   % (i, nbytes.value, list(shape), want))
    on = _lib.hvd_handle_output_device_at(ptr, i)
    if on >= 0:
        return _device_view(ptr, data, want, on, torch_dtype, shape)
    out = (_pool.empty(shape, torch_dtype, want) if _pool.pooled(want)
           else torch.empty(shape, dtype=torch_dtype))
    if want:
        ctypes.memmove(out.data_ptr(), data, want)
    return out if device < 0 else out.to(device_of(device))


class _DeviceResult:
    """A device result as CUDA's array interface describes it (bytes), holding a reference of its
    own to the runtime's handle: torch.as_tensor keeps this object alive as long as the tensor
    viewing the memory, and the last of them releases the handle (the runtime then frees the
    memory in stream order)."""

    def __init__(self, ptr, data, nbytes):
        self._ptr = _lib.hvd_handle_share(ptr)
        if not self._ptr:
            raise MemoryError("hvd: no memory for a reference to a device result")
        # Version 2: no stream to synchronize with; the runtime finished writing before the
        # operation completed.
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (data, False), "strides": None,
                                         "version": 2}

    def __del__(self, release=_release):
        # `release` is bound at definition: at interpreter exit the module's globals may be gone.
        if self._ptr:
            release(self._ptr)
            self._ptr = None


def _device_view(ptr, data, nbytes, on, torch_dtype, shape):
    if nbytes == 0:
        return torch.empty(shape, dtype=torch_dtype, device=device_of(on))
    raw = torch.as_tensor(_DeviceResult(ptr, data, nbytes), device=device_of(on))
    # Bytes, then the dtype (the array interface has no bfloat16), then the shape.
    return raw.view(torch_dtype).view(shape)


def output_bytes(ptr):
    """A byte collective's result (bytes)."""
    nbytes = ctypes.c_size_t(0)
    data = _lib.hvd_handle_output_at(ptr, 0, ctypes.byref(nbytes))
    return ctypes.string_at(data, nbytes.value) if nbytes.value else b""


def splits(ptr, i):
    """Result i's first-dimension rows (bytes, for byte collectives) per rank of the set."""
    n = _lib.hvd_handle_output_splits(ptr, i, None, 0)
    arr = (ctypes.c_int64 * max(1, n))()
    _lib.hvd_handle_output_splits(ptr, i, arr, n)
    return arr[:n]


# ---- join, barrier ------------------------------------------------------------------------------

def join(device=-1):
    """Tells the other ranks this rank has run out of data and waits until every rank has joined;
    meanwhile this rank takes part in the others' collectives (contributing zeros to allreduces,
    which then average over the ranks that contributed). Returns the rank that joined last.
    `device` is Horovod's (where its zero tensors were made: -1 the host, else a CUDA index); the
    runtime makes the zeros itself, on the device of each tensor the others submit."""
    if device is not None and not isinstance(device, (int, torch.device)):
        raise TypeError("join(device=...): expected a CUDA device index (-1: the host) or a "
                        "torch.device, not %r" % (device,))
    return run(_lib.hvd_enqueue_join(0), None, _last_joined_rank, "hvd.join")


def barrier(process_set=global_process_set):
    """Returns once every rank of `process_set` has called barrier()."""
    run(_lib.hvd_enqueue_barrier(set_id(process_set)), None, None, "hvd.barrier")


def _last_joined_rank(ptr, keep):
    return _lib.hvd_handle_last_joined_rank(ptr)
