"""hvd.common._fastcall's tensor path (hvd.allreduce and hvd.allreduce_ of a plain host tensor, in
C): which calls it takes, which it leaves to the Python path (NotImplemented, before anything is
submitted), and that both paths give the same results, bit for bit, and the same errors."""
import time
import traceback

import pytest
import torch

from helpers import DTYPES, assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


@pytest.fixture
def path(hvd):
    """The tensor path's entry point (skips where hvd.common._fastcall was not built)."""
    from hvd.torch import _allreduce
    if _allreduce._tensor_path is None:
        pytest.skip("hvd.common._fastcall was not built: the Python path alone")
    return _allreduce._tensor_path


def _python_path(call):
    """call() with the tensor path off: what hvd.torch does without it."""
    from hvd.torch import _allreduce
    saved, _allreduce._tensor_path = _allreduce._tensor_path, None
    try:
        return call()
    finally:
        _allreduce._tensor_path = saved


def _cached(name):
    """`name` in hvd.torch's name cache, where the tensor path looks names up."""
    from hvd.torch import _handles
    _handles.op_name("allreduce", name)
    return name


def _pattern(dtype, shape, rank):
    """Values that differ by element and by rank (bool: alternating by both)."""
    n = 1
    for d in shape:
        n *= d
    t = (torch.arange(n, dtype=torch.int64).reshape(shape) * 3 + rank * 5) % 7 + 1
    return (t % 2 == 1) if dtype is torch.bool else t.to(dtype)


def _args(hvd, op=None, name=None, average=None, compression=None, prescale=1.0, postscale=1.0,
          process_set=None):
    """allreduce_tensor's arguments after (tensor, inplace), defaults as hvd.allreduce's."""
    return (average, name, compression or hvd.Compression.none, op, prescale, postscale,
            process_set or hvd.global_process_set)


def test_plain_tensors_take_it_with_the_python_paths_results(hvd, path):
    r = hvd.rank()
    ops = [None, hvd.Sum, hvd.Min, hvd.Max, hvd.Product, hvd.Average]
    shapes = [(), (0,), (7,), (3, 5), (1,) * 15 + (2,)]
    for dtype in DTYPES:
        for op in ops:
            if dtype is torch.bool and op in (None, hvd.Average):
                continue  # refused by the runtime (below)
            for shape in shapes:
                what = "%s %s %s" % (dtype, op, shape)
                x = _pattern(dtype, shape, r)
                kept = x.clone()
                name = _cached("tensor_path.%s" % what) if len(shape) % 2 else None
                got = path(x, False, *_args(hvd, op=op, name=name, prescale=1.0))
                assert got is not NotImplemented, what
                assert got is not x and got.is_contiguous() and not got.requires_grad, what
                assert got.numel() == 0 or got.data_ptr() != x.data_ptr(), what
                assert_equal(x, kept, what + ": the input is kept")
                want = _python_path(lambda: hvd.allreduce(x, op=op, name=name))
                assert_equal(got, want, what)
                y = x.clone()
                assert path(y, True, *_args(hvd, op=op, name=name)) is y, what
                assert_equal(y, want, what + ", in place")


def test_scale_factors_and_both_public_calls(hvd, path):
    n, r = hvd.size(), hvd.rank()
    x = _pattern(torch.float64, (4, 3), r)
    name = _cached("tensor_path.scaled")
    for pre, post in ((2.0, 0.5), (1.0, 3.0), (0.25, 1.0)):
        got = path(x, False, *_args(hvd, op=hvd.Sum, name=name, prescale=pre, postscale=post))
        want = _python_path(lambda: hvd.allreduce(x, op=hvd.Sum, name=name, prescale_factor=pre,
                                                  postscale_factor=post))
        assert_equal(got, want, "scaled %s %s" % (pre, post))
    # The public functions take it: the same results as the Python path's.
    assert_equal(hvd.allreduce(x, op=hvd.Average, name=name),
                 _python_path(lambda: hvd.allreduce(x, op=hvd.Average, name=name)), "allreduce")
    y = x.clone()
    assert hvd.allreduce_(y, op=hvd.Sum) is y
    assert_equal(y, _python_path(lambda: hvd.allreduce_(x.clone(), op=hvd.Sum)), "allreduce_")
    # A name not seen before is encoded and cached as the Python path does it ("" is no name).
    from hvd.torch import _handles
    ones = torch.ones(4, 3)
    fresh = "tensor_path.fresh.%d" % n
    got = path(ones, False, *_args(hvd, op=hvd.Sum, name=fresh))
    assert got is not NotImplemented and _handles.names("allreduce")[fresh] == (
        "allreduce." + fresh).encode()
    assert_equal(got, ones * n, "a new name")
    assert_equal(path(ones, False, *_args(hvd, op=hvd.Sum, name="")), ones * n, "an empty name")


def test_outputs_are_made_as_torch_empty_like_makes_them(hvd, path):
    """Strides of size-1 dimensions (a transposed row, channels last), dimension names, a
    storage offset and inference mode: the C path's output is the Python path's."""
    import warnings
    n = hvd.size()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # named tensors are a prototype
        named = torch.ones(2, 3, names=("rows", "cols"))
    base = torch.arange(12, dtype=torch.float32)
    inputs = {
        "a transposed row": torch.ones(1, 3).t(),
        "channels last": torch.ones(2, 3, 1, 1).to(memory_format=torch.channels_last),
        "named": named,
        "an offset": base[2:8],
        "one element, stride 3": torch.ones(1, 3)[:, 0],
        "empty, transposed": torch.empty(3, 0).t(),
    }
    results = {}
    for what, x in inputs.items():
        assert x.is_contiguous(), what
        name = _cached("tensor_path.like.%s" % what)
        got = path(x, False, *_args(hvd, op=hvd.Sum, name=name))
        want = _python_path(lambda: hvd.allreduce(x, op=hvd.Sum, name=name))
        assert got is not NotImplemented, what
        assert torch.equal(got.rename(None), want.rename(None)), what
        assert got.stride() == want.stride() == x.stride(), what
        assert got.names == want.names == x.names, what
        results[what] = got
    got = results["an offset"]
    assert got.storage_offset() == 0 and torch.equal(got, base[2:8] * n)
    assert_equal(base, torch.arange(12, dtype=torch.float32), "the offset tensor's base")
    with torch.inference_mode():
        x = torch.ones(3)
        name = _cached("tensor_path.inference")
        got = path(x, False, *_args(hvd, op=hvd.Sum, name=name))
        want = _python_path(lambda: hvd.allreduce(x, op=hvd.Sum, name=name))
        assert got.is_inference() == want.is_inference(), "inference mode"
        assert_equal(got, want, "inference mode")


def test_anything_else_is_left_to_the_python_path(hvd, path):
    """NotImplemented, before anything is submitted (every rank makes the same calls)."""
    x = torch.ones(3, 4)
    cases = {
        "a subclass": (torch.nn.Parameter(torch.ones(3), requires_grad=False), {}),
        "needs a gradient": (torch.ones(3, requires_grad=True), {}),
        "not contiguous": (torch.ones(4, 3).t(), {}),
        "a sparse tensor": (torch.ones(2, 2).to_sparse(), {}),
        "an unsupported dtype": (torch.ones(2, dtype=torch.complex64), {}),
        "17 dimensions": (torch.ones((1,) * 16 + (2,)), {}),
        "not a tensor": ([1.0, 2.0], {}),
        "a name that is not a str": (x, {"name": 7}),
        "an unknown op": (x, {"op": 42}),
        "a bool op": (x, {"op": True}),
        "the deprecated average": (x, {"average": False}),
        "compression": (x, {"compression": hvd.Compression.fp16}),
        "an int scale factor": (x, {"prescale": 2}),
        "another process set": (x, {"process_set": hvd.ProcessSet([0])}),
        "a name UTF-8 cannot encode": (x, {"name": "\udc80"}),
    }
    for what, (t, kw) in cases.items():
        assert path(t, False, *_args(hvd, **kw)) is NotImplemented, what
        assert path(t, True, *_args(hvd, **kw)) is NotImplemented, what + ", in place"
    # Out of place, an output hvd.torch takes from its pool (4 MiB and up) is the Python path's;
    # in place there is no output to make.
    from hvd.torch import _allreduce, _output_pool
    small = _allreduce._SMALL_NUMEL  # float64: 4 MiB
    big = torch.zeros(small, dtype=torch.float64)
    if _output_pool.pooled(_output_pool.MIN_BYTES):
        assert path(big, False, *_args(hvd)) is NotImplemented
    assert path(big, True, *_args(hvd, op=hvd.Sum)) is big
    assert_equal(big, torch.zeros(small, dtype=torch.float64), "zeros")
    below = torch.ones(small - 1, dtype=torch.float64)
    assert_equal(path(below, False, *_args(hvd, op=hvd.Sum)), below * hvd.size(), "below")
    half = torch.ones(small, dtype=torch.float32)  # 2 MiB: below the pool's outputs
    assert_equal(path(half, False, *_args(hvd, op=hvd.Sum)), half * hvd.size(), "2 MiB")
    with pytest.raises(UnicodeEncodeError):  # the Python path's error for that name
        hvd.allreduce(x, name="\udc80")


def test_errors_are_the_python_paths(hvd, path):
    b = torch.ones(3, dtype=torch.bool)
    for call in (lambda: path(b, False, *_args(hvd, op=hvd.Average)),
                 lambda: hvd.allreduce(b, op=hvd.Average),
                 lambda: _python_path(lambda: hvd.allreduce(b, op=hvd.Average))):
        with pytest.raises(ValueError, match="average is not defined for bool"):
            call()
    # The tensor path's error starts its traceback at the call: no frame of hvd's basics.check.
    with pytest.raises(ValueError) as raised:
        hvd.allreduce(b, op=hvd.Average)
    files = [frame.filename for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert not any(f.endswith("basics.py") for f in files), files
    if hvd.size() > 1:
        with pytest.raises(hvd.HorovodInternalError, match="tensor_path.mm"):
            path(torch.ones(hvd.rank() + 1), False, *_args(hvd, name=_cached("tensor_path.mm")))
    with pytest.raises(TypeError, match="takes 9 arguments"):
        path(b, False)
    from hvd.common import basics
    keywords = ("tensor_type empty_like strided dtypes names encode_name ops average_op "
                "no_compression "
                "global_set max_new_bytes check table ids from_dlpack max_pooled").split()
    with pytest.raises(TypeError, match="no positional arguments"):
        basics.fastcall.configure_tensors(torch.Tensor)
    with pytest.raises(TypeError, match="max_pooled= is missing"):
        basics.fastcall.configure_tensors(**{k: None for k in keywords[:-1]})
    with pytest.raises(TypeError, match="must be dicts"):
        basics.fastcall.configure_tensors(**{k: None for k in keywords})
    # Nothing above changed the configuration; the job goes on in step.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())),
                 "after errors")


def test_a_late_peer_is_waited_for_past_the_first_slice(hvd, path):
    """A rank 1 s late: the others' first 100 ms in the runtime run out and the tensor path
    waits on in slices; every rank's result is right. (1 s: a rank may leave the barrier late on
    a loaded machine, and must still wait more than a slice.)"""
    n, r = hvd.size(), hvd.rank()
    if n == 1:
        pytest.skip("needs two ranks")
    want = torch.full((4, 3), float(n * (n + 1) // 2))
    for inplace in (False, True):
        name = _cached("tensor_path.late.%s" % inplace)
        x = torch.full((4, 3), float(r + 1))
        hvd.barrier()
        if r == 0:
            time.sleep(1.0)
        start = time.monotonic()
        got = path(x, inplace, *_args(hvd, op=hvd.Sum, name=name))
        if r != 0:
            assert time.monotonic() - start > 0.15, "did not wait for rank 0"
        assert got is x if inplace else got is not x
        assert_equal(got, want, "in place" if inplace else "out of place")


def _reconfigured(pool_bytes):
    """The tensor path configured again as under HVD_TORCH_OUTPUT_POOL_BYTES=pool_bytes."""
    from hvd.torch import _allreduce, _output_pool
    saved, _output_pool._limit = _output_pool._limit, pool_bytes
    try:
        _allreduce._tensor_path = _allreduce._configure_tensor_path()
    finally:
        _output_pool._limit = saved


def test_outputs_reuse_memory_only_once_torch_has_freed_it(hvd, path):
    """Out-of-place outputs are tensors over blocks of _fastcall's own (through DLPack), which go
    back to its slots when torch frees their storage: a view, a numpy array or another thread
    holding the memory keeps it from the next output."""
    import torch.utils.dlpack  # noqa: F401 (where torch has no _from_dlpack: torch.empty_like)
    if not hasattr(torch._C, "_from_dlpack"):
        pytest.skip("this torch has no _from_dlpack: outputs from torch.empty_like")
    n = hvd.size()
    name = _cached("tensor_path.outputs")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    want = x * n

    def reduce():
        got = hvd.allreduce(x, op=hvd.Sum, name=name)
        assert_equal(got, want, "output")
        return got

    from hvd.common import basics
    slots = basics.fastcall.output_slots
    first = reduce()
    block = first.data_ptr()
    view = first[1:]
    del first
    second = reduce()
    second_block = second.data_ptr()
    assert second_block != block, "a view's memory was given to a new output"
    second.fill_(-1.0)
    assert_equal(view, want[1:], "the view after the next output was written")
    assert block not in slots(), "a view's memory is in the free slots"
    del view
    assert block in slots(), "a block torch freed did not come back"
    del second
    third = reduce()
    assert third.data_ptr() in (block, second_block) and third.data_ptr() not in slots()
    fourth = reduce()
    array = third.numpy()
    held = third.data_ptr()
    del third, fourth
    assert held not in slots(), "a numpy array's memory is in the free slots"
    fifth = reduce()
    assert fifth.data_ptr() != held, "a numpy array's memory was given to a new output"
    fifth.zero_()
    assert torch.equal(torch.from_numpy(array), want), "the numpy array was overwritten"
    # An output dropped on another thread comes back too.
    import threading
    box = [reduce()]
    dropped = box[0].data_ptr()
    thread = threading.Thread(target=box.clear)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and dropped in slots(), "freed on another thread, not kept"
    del array, fifth
    # Ordinary tensors otherwise: in-place changes, autograd, pickling, shrinking; only growing
    # the storage is refused (as the output pool's large tensors).
    out = reduce()
    out.requires_grad_(True)
    (out * 2).sum().backward()
    assert_equal(out.grad, torch.full((3, 4), 2.0), "autograd on an output")
    import pickle
    assert_equal(pickle.loads(pickle.dumps(out.detach())), want, "pickled")
    plain = reduce()
    plain.resize_(2, 2)
    with pytest.raises(RuntimeError, match="not resizable"):
        plain.resize_(100)


def test_without_a_pool_outputs_come_from_torch(hvd, path):
    """HVD_TORCH_OUTPUT_POOL_BYTES=0: every output from torch.empty_like (storage that grows);
    reconfigured, the tensor path goes on."""
    name = _cached("tensor_path.nopool")
    x = torch.ones(5)
    try:
        _reconfigured(0)
        got = hvd.allreduce(x, op=hvd.Sum, name=name)
        assert_equal(got, x * hvd.size(), "without a pool")
        got.resize_(1000)  # torch's own storage
    finally:
        from hvd.torch import _output_pool
        _reconfigured(_output_pool.limit())
    assert_equal(hvd.allreduce(x, op=hvd.Sum, name=name), x * hvd.size(), "reconfigured")


def test_threads_calling_at_once(hvd, path):
    """Four threads per rank, each its own names, outputs kept (some as views) and dropped at
    random while the others run: every result right, every kept one intact."""
    import random
    import threading
    n, r = hvd.size(), hvd.rank()
    errors = []

    def work(tid):
        pick = random.Random(tid * 1000 + r)
        kept = []
        try:
            for i in range(200):
                size = (1, 7, 64, 1000)[i % 4]
                want = float(n * (n + 1) // 2 + n * tid)
                got = hvd.allreduce(torch.full((size,), float(r + 1 + tid)), op=hvd.Sum,
                                    name="tensor_path.thread%d.%d" % (tid, i % 4))
                if not torch.all(got == want):
                    errors.append("thread %d op %d: %s" % (tid, i, got[:3]))
                if pick.random() < 0.3:
                    kept.append(got if pick.random() < 0.5 else got[1:])
                if len(kept) > 8:
                    del kept[pick.randrange(len(kept))]
                if any(k.numel() and not torch.all(k == want) for k in kept):
                    errors.append("thread %d op %d: a kept output changed" % (tid, i))
        except Exception as e:  # (reported below, not lost in the thread)
            errors.append("thread %d: %r" % (tid, e))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in 60 s"
    assert not errors, errors[:5]
