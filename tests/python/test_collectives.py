"""hvd.torch's collectives on every dtype: sync and async, in place and not, and their errors."""
import json
import os
import shutil
import tempfile
import time

import pytest
import torch

from helpers import DTYPES, FLOATS, NUMERIC, assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


def base(dtype, shape=(3, 4)):
    """A small non-negative pattern (0..3) in `dtype` (bool: alternating)."""
    n = 1
    for d in shape:
        n *= d
    t = torch.arange(n).reshape(shape) % 4
    return (t % 2 == 1) if dtype is torch.bool else t.to(dtype)


def test_topology_and_build_flags(hvd):
    assert hvd.is_initialized()
    assert 0 <= hvd.rank() < hvd.size()
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    assert hvd.is_homogeneous() is True  # one host
    assert hvd.mpi_built() is False and hvd.mpi_enabled() is False
    assert hvd.gloo_built() is False and hvd.gloo_enabled() is False
    assert hvd.ddl_built() is False and hvd.ccl_built() is False and hvd.rocm_built() is False
    # CUDA: true where the CUDA plugin was built beside libhvd.so (or the runtime says so);
    # nccl_built() is NCCL's version code (an int), 0 without the plugin.
    from hvd.common import build_info
    assert isinstance(hvd.cuda_built(), bool) and isinstance(hvd.nccl_built(), int)
    if build_info._abi_flag("hvd_cuda_built") is None:
        assert hvd.cuda_built() == (build_info.cuda_plugin_path() is not None)
    if not hvd.cuda_built():
        assert hvd.nccl_built() == 0
    from hvd.common.util import gpu_available
    assert gpu_available("torch") == hvd.cuda_built() and gpu_available("tensorflow") is False
    with pytest.raises(ValueError):
        hvd.mpi_threads_supported()
    # Horovod's values.
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert hvd.global_process_set.process_set_id == 0
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert hvd.global_process_set.size() == hvd.size()
    assert hvd.global_process_set.rank() == hvd.rank()
    assert hvd.global_process_set.included()
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="across.reinit")
    hvd.init()  # again: does nothing (pending and completed operations stay)
    assert_equal(hvd.synchronize(h), torch.full((2,), float(hvd.size())), "after init()")


def test_allreduce_every_dtype_and_op(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = n * (n + 1) // 2
    for dtype in DTYPES:
        b = base(dtype)
        mine = b if dtype is torch.bool else b * (r + 1)  # (rank+1) * pattern
        if dtype is torch.bool:
            # Equal on every rank: every op gives it back. Sum and Max are logical or, Min and
            # Product logical and.
            for op in (hvd.Sum, hvd.Max, hvd.Min, hvd.Product):
                assert_equal(hvd.allreduce(b, op=op), b, "bool op %d" % op)
            odd = torch.full((5,), r % 2 == 1)
            assert_equal(hvd.allreduce(odd, op=hvd.Sum), torch.full((5,), n > 1), "bool or")
            assert_equal(hvd.allreduce(odd, op=hvd.Max), torch.full((5,), n > 1), "bool max")
            assert_equal(hvd.allreduce(odd, op=hvd.Min), torch.full((5,), False), "bool and")
            assert_equal(hvd.allreduce(odd, op=hvd.Product), torch.full((5,), False), "bool prod")
            continue
        assert_equal(hvd.allreduce(mine, op=hvd.Sum), b * tri, "%s sum" % dtype)
        assert_equal(hvd.allreduce(mine, op=hvd.Min), b, "%s min" % dtype)
        assert_equal(hvd.allreduce(mine, op=hvd.Max), b * n, "%s max" % dtype)
        only_root = b if r == 0 else torch.ones_like(b)
        assert_equal(hvd.allreduce(only_root, op=hvd.Product), b, "%s product" % dtype)
        # Average of equal tensors is exact for every dtype; of (rank+1)*b for floats.
        assert_equal(hvd.allreduce(b, op=hvd.Average), b, "%s average" % dtype)
        assert_equal(hvd.allreduce(b), b, "%s default op" % dtype)
        assert torch.equal(mine, b if dtype is torch.bool else b * (r + 1)), "input modified"
        if dtype in FLOATS:
            assert_equal(hvd.allreduce(mine, op=hvd.Average), b * (n + 1) / 2, "%s avg" % dtype)
            assert_equal(hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0,
                                       postscale_factor=0.5), b * tri, "%s scaled" % dtype)
            assert_equal(hvd.allreduce(b, op=hvd.Sum, postscale_factor=1.0 / n), b,
                         "%s postscale" % dtype)


def test_allreduce_inplace_async_noncontiguous(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = n * (n + 1) // 2
    for dtype in NUMERIC:
        b = base(dtype, (4, 6))
        t = b * (r + 1)
        out = hvd.allreduce_(t, op=hvd.Sum, name="inplace.%s" % dtype)
        assert out is t
        assert_equal(t, b * tri, "%s allreduce_" % dtype)

        h = hvd.allreduce_async(b * (r + 1), op=hvd.Sum, name="async.%s" % dtype)
        assert_equal(hvd.synchronize(h), b * tri, "%s allreduce_async" % dtype)
        assert hvd.synchronize(h) is None  # a used handle is unknown (as Horovod)

        t = b * (r + 1)
        h = hvd.allreduce_async_(t, op=hvd.Sum)
        while not hvd.poll(h):
            pass
        assert hvd.synchronize(h) is t
        assert_equal(t, b * tri, "%s allreduce_async_" % dtype)

        # Non-contiguous: a transposed view and a strided slice, reduced in place.
        big = (b * (r + 1)).t().contiguous()          # 6 x 4
        view = big.t()                                 # 4 x 6, not contiguous
        assert not view.is_contiguous()
        assert hvd.allreduce_(view, op=hvd.Sum) is view
        assert_equal(view, b * tri, "%s non-contiguous allreduce_" % dtype)
        strided = torch.zeros(4, 12, dtype=dtype)
        strided[:, ::2] = b * (r + 1)
        out = hvd.allreduce(strided[:, ::2], op=hvd.Sum)
        assert out.is_contiguous()
        assert_equal(out, b * tri, "%s strided allreduce" % dtype)
        assert_equal(strided[:, 1::2], torch.zeros(4, 6, dtype=dtype), "untouched gaps")


def test_allreduce_scalar_empty_and_average_arg(hvd):
    n = hvd.size()
    assert_equal(hvd.allreduce(torch.tensor(2.0), op=hvd.Sum), torch.tensor(2.0 * n), "scalar")
    empty = torch.zeros(0, 3)
    assert_equal(hvd.allreduce(empty, op=hvd.Sum), empty, "empty")
    x = torch.ones(3)
    with pytest.warns(DeprecationWarning):
        assert_equal(hvd.allreduce(x, average=False), x * n, "average=False is Sum")
    with pytest.warns(DeprecationWarning):
        assert_equal(hvd.allreduce(x, average=True), x, "average=True is Average")
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_an_integer_average_is_the_rounded_exact_quotient(hvd):
    """An integer average (with a postscale of 1/k too) divides the sum exactly and rounds halves
    away from zero: the product with the double nearest 1/(6n) would give 0 for 3n / 6n."""
    n = hvd.size()
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        half = hvd.allreduce(torch.full((5,), 3, dtype=dtype), op=hvd.Average,
                             postscale_factor=1.0 / 6, name="int_average.%s" % dtype)
        assert_equal(half, torch.ones(5, dtype=dtype), "%s: 3n / 6n rounds up" % dtype)
        if dtype is not torch.uint8:
            neg = hvd.allreduce(torch.full((3,), -3, dtype=dtype), op=hvd.Average,
                                postscale_factor=1.0 / 6)
            assert_equal(neg, torch.full((3,), -1, dtype=dtype), "%s: -0.5 goes to -1" % dtype)
    # Past 2^53, where a product in long double is off: (2^59 + 7) is divisible by 3.
    v = (1 << 59) + 7
    big = hvd.allreduce(torch.full((2,), v, dtype=torch.int64), op=hvd.Average,
                        postscale_factor=1.0 / 3)
    assert big.tolist() == [v // 3, v // 3]


def test_synchronous_allreduce_past_its_first_wait(hvd):
    """A synchronous allreduce the background thread runs (HVD_RUN_ON_CALLER=0 here; a CUDA
    tensor's always) is waited for 100 ms in the call that submits it; a late peer makes the
    others wait on: out of place, in place and in place on a non-contiguous tensor all still come
    out right, through hvd.common._fastcall's tensor path, its Python path and ctypes."""
    n, r = hvd.size(), hvd.rank()
    hvd.barrier()  # shutdown fails what is pending on other ranks
    hvd.shutdown()
    os.environ["HVD_RUN_ON_CALLER"] = "0"
    try:
        hvd.init(process_sets="dynamic")
        _late_peer_allreduces(hvd, n, r)
        from hvd.torch import _allreduce
        path, _allreduce._tensor_path = _allreduce._tensor_path, None  # the Python path
        try:
            _late_peer_allreduces(hvd, n, r)
        finally:
            _allreduce._tensor_path = path
        # Again through ctypes alone (the tensor path is _fastcall's too).
        fast, path = _allreduce._fast, _allreduce._tensor_path
        _allreduce._fast = _allreduce._tensor_path = None
        try:
            _late_peer_allreduces(hvd, n, r)
        finally:
            _allreduce._fast, _allreduce._tensor_path = fast, path
    finally:
        del os.environ["HVD_RUN_ON_CALLER"]
        if hvd.is_initialized():
            hvd.barrier()
            hvd.shutdown()
        hvd.init(process_sets="dynamic")  # as the session fixture left it


def _late_peer_allreduces(hvd, n, r):
    want = torch.full((4, 3), float(n * (n + 1) // 2))
    for kind in ("out", "in", "strided"):
        if r == 0:
            time.sleep(0.3)
        x = torch.full((4, 3), float(r + 1))
        if kind == "out":
            got = hvd.allreduce(x, op=hvd.Sum, name="late." + kind)
            assert_equal(x, torch.full((4, 3), float(r + 1)), "the input is kept")
        elif kind == "in":
            got = hvd.allreduce_(x, op=hvd.Sum, name="late." + kind)
            assert got is x
        else:
            t = torch.full((3, 4), float(r + 1)).t()
            got = hvd.allreduce_(t, op=hvd.Sum, name="late." + kind)
            assert got is t and not t.is_contiguous()
        assert_equal(got, want, kind)


def test_unsupported_dtype_and_bad_arguments(hvd):
    for dtype in (torch.complex64, torch.complex128):
        with pytest.raises(ValueError, match=str(dtype).replace("torch.", "")):
            hvd.allreduce(torch.zeros(2, dtype=dtype))
        with pytest.raises(ValueError, match="not supported"):
            hvd.allgather_async(torch.zeros(2, dtype=dtype))
    with pytest.raises(TypeError):
        hvd.allreduce_async([1, 2, 3])
    with pytest.raises(ValueError, match="op"):
        hvd.allreduce(torch.ones(2), op=42)
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce_async(torch.ones(2, 2).to_sparse())
    # Refused by the runtime on every rank alike (its message arrives as the exception's).
    with pytest.raises(ValueError, match="average is not defined for bool"):
        hvd.allreduce(torch.ones(3, dtype=torch.bool), op=hvd.Average)
    with pytest.raises(ValueError, match="scalar"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(ValueError, match="not a rank"):
        hvd.broadcast(torch.ones(2), root_rank=hvd.size())
    with pytest.raises(ValueError):
        hvd.reducescatter(torch.ones(4), op=hvd.Max)
    with pytest.raises(ValueError, match="unknown|not created|cleared"):
        hvd.poll(123456789)
    # The C side read a name up to its NUL: 'a\0x' and 'a\0y' were one name, 'allreduce.a'.
    for call in (hvd.allreduce, hvd.allreduce_async, hvd.allgather, hvd.broadcast_):
        with pytest.raises(ValueError, match="NUL character"):
            call(torch.ones(2), name="a\0x") if call is not hvd.broadcast_ else call(
                torch.ones(2), 0, name="a\0x")
    # The job goes on after refused operations.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())),
                 "after errors")


def test_mismatch_between_ranks_is_horovod_internal_error(hvd):
    if hvd.size() == 1:
        pytest.skip("needs two ranks")
    t = torch.ones(hvd.rank() + 1)  # a different shape on every rank
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.allreduce(t, name="mismatched")
    assert isinstance(e.value, RuntimeError)
    assert "mismatched" in str(e.value)
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())),
                 "after a mismatch")


def test_grouped_allreduce(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = n * (n + 1) // 2
    for dtype in NUMERIC:
        ts = [base(dtype, (2, 3)) * (r + 1), base(dtype, (5,)) * (r + 1)]
        expected = [base(dtype, (2, 3)) * tri, base(dtype, (5,)) * tri]
        outs = hvd.grouped_allreduce(ts, op=hvd.Sum, name="g.%s" % dtype)
        for o, e in zip(outs, expected):
            assert_equal(o, e, "%s grouped_allreduce" % dtype)
        outs = hvd.synchronize(hvd.grouped_allreduce_async(ts, op=hvd.Sum))
        for o, e in zip(outs, expected):
            assert_equal(o, e, "%s grouped_allreduce_async" % dtype)
        res = hvd.grouped_allreduce_(ts, op=hvd.Sum)
        assert all(a is b for a, b in zip(res, ts))
        for o, e in zip(ts, expected):
            assert_equal(o, e, "%s grouped_allreduce_" % dtype)
        ts = [base(dtype, (2, 3)) * (r + 1), base(dtype, (5,)) * (r + 1)]
        res = hvd.synchronize(hvd.grouped_allreduce_async_(ts, op=hvd.Sum))
        for o, e in zip(ts, expected):
            assert_equal(o, e, "%s grouped_allreduce_async_" % dtype)
    # Mixed dtypes, a non-contiguous member, Average.
    ts = [torch.ones(3) * (r + 1), (torch.ones(2, 4, dtype=torch.float64) * (r + 1)).t()]
    outs = hvd.grouped_allreduce(ts)
    assert_equal(outs[0], torch.ones(3) * (n + 1) / 2, "mixed 0")
    assert_equal(outs[1], torch.ones(4, 2, dtype=torch.float64) * (n + 1) / 2, "mixed 1")
    with pytest.raises(ValueError):
        hvd.grouped_allreduce([])


def test_large_outputs_reuse_pooled_memory(hvd):
    """Out-of-place outputs of at least 4 MiB come from hvd.torch's pool: correct values, every
    dtype size, the memory of a dropped result (and all its views) back in the pool and serving
    the next result of its size, a result still viewed keeping its own, and results that behave as
    torch.empty's under autograd (not views)."""
    from hvd.torch import _output_pool as pool
    if not pool.pooled(pool.MIN_BYTES):
        pytest.skip("%s=0: no pool" % pool.POOL_ENV)
    n, r = hvd.size(), hvd.rank()
    for dtype in (torch.float32, torch.float64, torch.int16, torch.bool):
        x = torch.ones(1 << 21, dtype=dtype) if dtype is torch.bool else \
            torch.full((1 << 21,), r + 1, dtype=dtype)
        out = hvd.allreduce(x, op=hvd.Max if dtype is torch.bool else hvd.Sum)
        want = torch.ones_like(x) if dtype is torch.bool else torch.full_like(x, n * (n + 1) // 2)
        assert_equal(out, want, "%s pooled allreduce" % dtype)
        assert out._base is None and out.is_contiguous() and out.shape == x.shape
    x = torch.full((1024, 2048), float(r))  # 8 MiB
    first = hvd.allreduce(x, op=hvd.Sum)
    address = first.data_ptr()
    view = first[1:]
    del first
    before = pool.stats()
    second = hvd.allreduce(x, op=hvd.Sum)  # the first's block is still viewed: not reused
    assert second.data_ptr() != address
    assert_equal(view, torch.full((1023, 2048), float(n * (n - 1) // 2)), "a view kept its block")
    del second
    freed = pool.stats()
    assert freed[0] >= before[0], (before, freed)  # the second's block came back
    del view  # the first's last view: its block goes back
    assert pool.stats()[0] == freed[0] + 1, (freed, pool.stats())
    third = hvd.allreduce(x * 2, op=hvd.Sum)  # the block freed last, the first's
    assert third.data_ptr() == address
    assert_equal(third, torch.full((1024, 2048), float(n * (n - 1))), "a reused block")
    # Grouped, and results the runtime owns (copied into pooled memory too).
    outs = hvd.grouped_allreduce([x, x + 1], op=hvd.Sum)
    assert_equal(outs[1], torch.full((1024, 2048), float(n * (n + 1) // 2)), "pooled grouped")
    rows = torch.full((1 << 20, 2), float(r))
    gathered = hvd.allgather(rows)
    assert_equal(gathered, torch.cat([torch.full((1 << 20, 2), float(k)) for k in range(n)]),
                 "pooled allgather")
    # Autograd: a large differentiable result may be changed in place, as a small one.
    w = torch.ones(1 << 21, requires_grad=True)
    y = hvd.allreduce(w * 1.0, op=hvd.Sum)
    y.mul_(2)
    y.sum().backward()
    assert_equal(w.grad, torch.full_like(w, 2.0 * n), "gradient through a pooled result")
    with torch.no_grad():
        m = hvd.allreduce(x, op=hvd.Sum)
    m.add_(1.0)


def test_allgather(hvd):
    n, r = hvd.size(), hvd.rank()
    for dtype in DTYPES:
        def rows_of(k):
            t = torch.full((k + 1, 2, 3), k % 4, dtype=torch.int64)
            return (t % 2 == 1) if dtype is torch.bool else t.to(dtype)
        expected = torch.cat([rows_of(k) for k in range(n)])
        assert_equal(hvd.allgather(rows_of(r)), expected, "%s allgather" % dtype)
        h = hvd.allgather_async(rows_of(r), name="ag.%s" % dtype)
        assert_equal(hvd.synchronize(h), expected, "%s allgather_async" % dtype)
        outs = hvd.grouped_allgather([rows_of(r), rows_of(r)[:, 0]])
        assert_equal(outs[0], expected, "%s grouped_allgather 0" % dtype)
        assert_equal(outs[1], expected[:, 0], "%s grouped_allgather 1" % dtype)
        outs = hvd.synchronize(hvd.grouped_allgather_async([rows_of(r)]))
        assert_equal(outs[0], expected, "%s grouped_allgather_async" % dtype)
    # A rank with no rows, and a non-contiguous input.
    t = torch.arange(6.0).reshape(2, 3).t() if r != 0 else torch.zeros(0, 2)
    out = hvd.allgather(t)
    want = torch.cat([torch.zeros(0, 2)] + [torch.arange(6.0).reshape(2, 3).t()] * (n - 1))
    assert_equal(out, want, "uneven, with an empty rank")


def test_broadcast(hvd):
    n, r = hvd.size(), hvd.rank()
    root = n - 1
    for dtype in DTYPES:
        b = base(dtype)
        mine = b if r == root else torch.zeros_like(b)
        out = hvd.broadcast(mine, root_rank=root)
        assert_equal(out, b, "%s broadcast" % dtype)
        if r != root:
            assert_equal(mine, torch.zeros_like(b), "%s broadcast input untouched" % dtype)
        assert_equal(hvd.synchronize(hvd.broadcast_async(mine, root, name="bc.%s" % dtype)), b,
                     "%s broadcast_async" % dtype)
        t = mine.clone()
        assert hvd.broadcast_(t, root) is t
        assert_equal(t, b, "%s broadcast_" % dtype)
        t = mine.clone()
        assert hvd.synchronize(hvd.broadcast_async_(t, root)) is t
        assert_equal(t, b, "%s broadcast_async_" % dtype)
        # In place on a non-contiguous view.
        holder = torch.zeros(4, 3, dtype=dtype)
        if r == root:
            holder.copy_(b.t())
        view = holder.t()
        hvd.broadcast_(view, root)
        assert_equal(view, b, "%s non-contiguous broadcast_" % dtype)


def test_alltoall(hvd):
    n, r = hvd.size(), hvd.rank()
    for dtype in NUMERIC + [torch.bool]:
        def block(src, dst, rows):
            v = (src * 10 + dst) % 100
            t = torch.full((rows, 3), v, dtype=torch.int64)
            return (t % 2 == 1) if dtype is torch.bool else t.to(dtype)
        # Uneven: rank r sends d+1 rows to rank d.
        tensor = torch.cat([block(r, d, d + 1) for d in range(n)])
        splits = [d + 1 for d in range(n)]
        expected = torch.cat([block(s, r, r + 1) for s in range(n)])
        out, received = hvd.alltoall(tensor, splits=splits)
        assert_equal(out, expected, "%s alltoall" % dtype)
        assert received.dtype == torch.int32 and received.tolist() == [r + 1] * n
        out, received = hvd.alltoall(tensor, splits=torch.tensor(splits, dtype=torch.int64))
        assert received.dtype == torch.int64 and received.tolist() == [r + 1] * n
        out, received = hvd.synchronize(hvd.alltoall_async(tensor, splits, name="a2a.%s" % dtype))
        assert_equal(out, expected, "%s alltoall_async" % dtype)
        # Even split: returns the output alone (as Horovod when no splits are given).
        even = torch.cat([block(r, d, 2) for d in range(n)])
        out = hvd.alltoall(even)
        assert isinstance(out, torch.Tensor)
        assert_equal(out, torch.cat([block(s, r, 2) for s in range(n)]), "%s even" % dtype)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(torch.ones(n + 1, 2), splits=[1] * (n + 1))


def test_reducescatter(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = n * (n + 1) // 2
    rows = 2 * n + 1  # uneven: lower ranks take one extra row
    shares = [rows // n + (1 if k < rows % n else 0) for k in range(n)]
    start = sum(shares[:r])
    for dtype in NUMERIC:
        b = base(dtype, (rows, 3))
        mine = b * (r + 1)
        want = (b * tri)[start:start + shares[r]]
        assert_equal(hvd.reducescatter(mine, op=hvd.Sum), want, "%s reducescatter" % dtype)
        assert_equal(hvd.synchronize(hvd.reducescatter_async(mine, name="rs.%s" % dtype,
                                                             op=hvd.Sum)),
                     want, "%s reducescatter_async" % dtype)
        assert_equal(hvd.reducescatter(b), b[start:start + shares[r]], "%s average" % dtype)
        outs = hvd.grouped_reducescatter([mine, mine[:, :1]], op=hvd.Sum)
        assert_equal(outs[0], want, "%s grouped_reducescatter 0" % dtype)
        assert_equal(outs[1], want[:, :1], "%s grouped_reducescatter 1" % dtype)
        outs = hvd.synchronize(hvd.grouped_reducescatter_async([mine], op=hvd.Sum))
        assert_equal(outs[0], want, "%s grouped_reducescatter_async" % dtype)
    x = torch.ones(rows, 2) * (r + 1)
    out = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25)
    assert_equal(out, torch.ones(shares[r], 2) * tri * 0.5, "scaled reducescatter")


def test_compression_fp16(hvd):
    n = hvd.size()
    x = torch.full((4,), 0.5, dtype=torch.float32)
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert_equal(out, torch.full((4,), 0.5 * n), "fp16 compressed")
    ints = torch.ones(3, dtype=torch.int32)
    assert_equal(hvd.allreduce(ints, op=hvd.Sum, compression=hvd.Compression.fp16),
                 ints * n, "fp16 leaves ints alone")
    c, ctx = hvd.Compression.fp16.compress(torch.ones(2, dtype=torch.float64))
    assert c.dtype == torch.float16
    assert hvd.Compression.fp16.decompress(c, ctx).dtype == torch.float64


def test_barrier_join_and_adasum(hvd):
    hvd.barrier()
    hvd.barrier(process_set=hvd.global_process_set)
    assert hvd.join() in range(hvd.size())
    n = hvd.size()
    x = torch.ones(8, dtype=torch.float32)
    out = hvd.allreduce(x, op=hvd.Adasum)  # equal vectors: Adasum gives the vector back
    assert torch.allclose(out, x, atol=1e-5), out
    with pytest.raises(ValueError, match="Adasum"):
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
    assert n >= 1


def test_timeline(hvd):
    # Every rank names rank 0's path (rank 0 writes the file).
    path = os.path.join(tempfile.mkdtemp(), "timeline.json") if hvd.rank() == 0 else None
    path = hvd.broadcast_object(path, root_rank=0, name="timeline.path")
    hvd.start_timeline(path, mark_cycles=True)
    with pytest.raises(ValueError):
        hvd.start_timeline(path)  # already recording
    hvd.allreduce(torch.ones(4), name="timeline.tensor")
    hvd.stop_timeline()
    hvd.stop_timeline()  # none recording: nothing to do, as Horovod's returns then
    if hvd.rank() == 0:
        with open(path) as f:
            text = f.read()
        shutil.rmtree(os.path.dirname(path))
        assert "timeline.tensor" in text, text[:500]
        assert json.loads(text)
    hvd.barrier()


def test_device_tensors(hvd):
    from hvd.torch import _handles
    with pytest.raises(ValueError, match="meta"):
        hvd.allreduce(torch.empty(2, device="meta"))
    # A CUDA tensor goes to the runtime with its device index; this build has no GPU data path
    # and says so (checked locally, before anything is negotiated). This torch has no CUDA, so
    # the descriptor is made by hand.
    t = torch.ones(2)
    d = _handles.desc(t, 0, 0)  # float32 on CUDA device 0
    h = _handles.submit(_handles._lib.hvd_enqueue_allreduce(b"cuda.probe", d, d, 0, 1.0, 1.0, 0),
                        t, None)
    with pytest.raises(RuntimeError, match="CUDA device 0") as e:
        hvd.synchronize(h)
    assert not isinstance(e.value, hvd.HorovodInternalError)
