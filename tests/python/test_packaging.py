"""The library loader and the `horovod` compat shim."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("hvd_session")

COMPAT = os.environ.get("HVD_TEST_COMPAT_DIR")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVD_", "HOROVOD_")) or k == "HVD_TEST_COMPAT_DIR"}
    env.update(extra)
    return env


def test_missing_library_is_a_clear_import_error(hvd):
    if hvd.rank() != 0:
        pytest.skip("rank 0 checks it")
    out = subprocess.run([sys.executable, "-c", "import hvd.common.basics"], capture_output=True,
                         text=True, env=clean_env(HVD_LIBRARY="/nonexistent/libhvd.so"),
                         timeout=60)
    assert out.returncode != 0
    assert "ImportError" in out.stderr and "/nonexistent/libhvd.so" in out.stderr, out.stderr
    assert "HVD_LIBRARY" in out.stderr


def test_library_found_beside_the_package(hvd):
    from hvd.common import basics
    assert os.path.basename(basics.library_path) == "libhvd.so"
    assert basics.lib.hvd_abi_version() >= 2


@pytest.mark.skipif(not COMPAT, reason="HVD_TEST_COMPAT_DIR not set (the ctest sets it)")
def test_horovod_names(hvd):
    sys.path.append(COMPAT)
    try:
        import horovod
        import horovod.torch as hvd2
        from horovod.torch.mpi_ops import allreduce as compat_allreduce
        from horovod.common.exceptions import HorovodInternalError
        from horovod.common.process_sets import global_process_set
        import horovod.torch.optimizer
    finally:
        sys.path.remove(COMPAT)
    import hvd.torch
    assert hvd2 is hvd.torch
    assert compat_allreduce is hvd.torch.allreduce
    assert HorovodInternalError is hvd.torch.HorovodInternalError
    assert global_process_set is hvd.torch.global_process_set
    assert horovod.torch.optimizer.DistributedOptimizer is hvd.torch.DistributedOptimizer
    assert horovod.__version__.startswith("0.28")
    assert hvd2.size() == hvd.torch.size()
