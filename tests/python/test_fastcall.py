"""hvd.common._fastcall, the allreduce calls without ctypes: used where it was built, coupled to
nothing but CPython's stable ABI, refusing bad arguments before anything is submitted; and the
ctypes path hvd.torch falls back to without it, which must give the same results."""
import glob
import os
import shutil
import subprocess

import pytest
import torch

from helpers import assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


def _module_file():
    from hvd.common import basics
    here = os.path.dirname(os.path.abspath(basics.__file__))
    found = glob.glob(os.path.join(here, "_fastcall*.so"))
    return found[0] if found else None


def test_fastcall_is_used_where_it_was_built(hvd):
    from hvd.common import basics
    from hvd.torch import _allreduce
    path = _module_file()
    if path is None:
        assert basics.fastcall is None and _allreduce._fast is None
        pytest.skip("hvd.common._fastcall was not built (no Python headers): ctypes only")
    assert path.endswith(".abi3.so"), "not a stable-ABI module: %s" % path
    if basics.fastcall is None:
        try:
            import hvd.common._fastcall  # noqa: F401
        except ImportError as e:  # e.g. an interpreter without the stable ABI (free-threaded)
            pytest.skip("%s cannot be loaded by this interpreter (%s): ctypes only" % (path, e))
    assert basics.fastcall is not None and _allreduce._fast is basics.fastcall


def test_fastcall_links_nothing_but_libc(hvd):
    """One build serves every CPython >= 3.10 and every torch: it needs no library but libc (the
    interpreter provides the C API; libhvd's functions come from bind())."""
    path = _module_file()
    if path is None or shutil.which("readelf") is None:
        pytest.skip("no hvd.common._fastcall, or no readelf")
    out = subprocess.run(["readelf", "-d", "-W", path], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    needed = [line.split("[")[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    # libc at most: no torch, no Python, no libhvd, no C++ runtime.
    assert all(lib.startswith("libc.so") for lib in needed), needed


def test_fastcall_refuses_bad_arguments_before_submitting(hvd):
    from hvd.common import basics
    fast = basics.fastcall
    if fast is None:
        pytest.skip("hvd.common._fastcall was not built")
    t = torch.zeros(4)
    good = [b"allreduce.fastcall.bad", t.data_ptr(), t.data_ptr(), t.shape, 0, -1, None, 1, 1.0,
            1.0, 0]

    def call(i, value, error, match):
        args = list(good)
        args[i] = value
        with pytest.raises(error, match=match):
            fast.enqueue_allreduce(*args)

    with pytest.raises(TypeError, match="takes 11 arguments"):
        fast.enqueue_allreduce(*good[:10])
    with pytest.raises(TypeError, match="takes 13 arguments"):
        fast.run_allreduce(*good)
    with pytest.raises(TypeError, match="pending must be a list"):
        fast.run_allreduce(*good, 100, None)
    call(0, "a str", TypeError, "name must be bytes")
    call(1, 1.5, TypeError, "input_ptr must be an int")
    call(3, [4], TypeError, "shape must be a tuple")
    call(3, (1,) * 30 + ("x",), TypeError, "")  # past the dimensions kept on the stack
    call(3, (4, "x"), TypeError, "")
    call(4, 1 << 40, OverflowError, "dtype")
    call(8, "1.0", TypeError, "")
    with pytest.raises(ValueError, match="hvd_wait_for is NULL"):
        fast.bind(1, 1, 0, 1, 1, 1)
    with pytest.raises(TypeError, match="not 2 arguments"):
        fast.bind(1, 1)
    # Nothing was submitted: the job goes on in step.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())),
                 "after refused calls")


@pytest.fixture
def ctypes_only(monkeypatch):
    """hvd.torch as where hvd.common._fastcall is missing."""
    from hvd.torch import _allreduce
    monkeypatch.setattr(_allreduce, "_fast", None)
    monkeypatch.setattr(_allreduce, "_tensor_path", None)  # (made of _fastcall too)


@pytest.mark.usefixtures("ctypes_only")
def test_allreduce_through_ctypes_alone(hvd):
    n, r = hvd.size(), hvd.rank()
    tri = float(n * (n + 1) // 2)
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        x = torch.full((3, 5), r + 1, dtype=dtype)
        want = torch.full((3, 5), tri, dtype=dtype)
        assert_equal(hvd.allreduce(x, op=hvd.Sum, name="ctypes.out"), want, "out of place")
        assert_equal(x, torch.full((3, 5), r + 1, dtype=dtype), "input kept")
        y = x.clone()
        assert hvd.allreduce_(y, op=hvd.Sum, name="ctypes.in") is y
        assert_equal(y, want, "in place")
        view = x.clone().t()
        assert hvd.allreduce_(view, op=hvd.Sum) is view and not view.is_contiguous()
        assert_equal(view, want.t(), "in place, not contiguous")
        h = hvd.allreduce_async(x, op=hvd.Sum, name="ctypes.async")
        assert_equal(hvd.synchronize(h), want, "async")
        y = x.clone()
        assert hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum)) is y
        assert_equal(y, want, "async in place")
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, prescale_factor=3.0,
                               postscale_factor=0.5), torch.full((2,), 1.5 * n), "scaled")
    _many_dimensions(hvd, n)


def test_allreduce_of_many_dimensions(hvd):
    _many_dimensions(hvd, hvd.size())


def _many_dimensions(hvd, n):
    """More dimensions than hvd.common._fastcall keeps on its stack (16), and one with none."""
    x = torch.ones((1,) * 20 + (3,))
    assert_equal(hvd.allreduce(x, op=hvd.Sum), x * n, "21 dimensions")
    assert_equal(hvd.allreduce(torch.tensor(2.0), op=hvd.Sum), torch.tensor(2.0 * n), "scalar")
    with pytest.raises(ValueError, match="average is not defined for bool"):
        hvd.allreduce(torch.ones(3, dtype=torch.bool), op=hvd.Average)
