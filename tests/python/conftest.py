"""hvd.torch's tests: every test module runs on every rank of a job (hvdrun -np 1, 2 or 4 runs
`pytest tests/python` on each rank), so tests must submit the same collectives in the same order
on every rank, and skip alike on every rank. A failing rank exits non-zero and hvdrun ends the
others at once.

Modules that use hvd declare `pytestmark = pytest.mark.usefixtures("hvd_session")`; the session
initializes hvd once, with dynamic process sets allowed."""
import os

import pytest


@pytest.fixture(scope="session")
def hvd_session():
    import hvd.torch as hvd
    hvd.init(process_sets="dynamic")
    yield hvd
    # Shutdown fails whatever is still pending on other ranks: let all arrive first.
    hvd.barrier()
    hvd.shutdown()


@pytest.fixture
def hvd(hvd_session):
    return hvd_session


def under_launcher():
    """True when this process is a rank of a job (hvdrun sets the rank variables)."""
    return any(v in os.environ for v in ("HVD_SIZE", "HOROVOD_SIZE", "HVD_RANK", "HOROVOD_RANK"))
