"""A process forked from a rank (os.fork(), a DataLoader worker with the fork start method) that
leaves through sys.exit() or calls hvd.shutdown() leaves the rank's session alone: it hung in
libhvd's exit handler, or closed the rank's connections so that its next allreduce failed. A
collective it submits fails at once, naming the fork, instead of running over the rank's links."""
import atexit
import ctypes
import os
import time

import pytest
import torch

pytestmark = pytest.mark.usefixtures("hvd_session")


def _fork_and_wait(child):
    pid = os.fork()
    if pid == 0:
        try:
            child()
        finally:
            os._exit(1)  # only where child() did not leave
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child did not exit within 20 s")


@pytest.mark.parametrize("how", ["exit", "shutdown_then_exit", "collective_then_exit"])
def test_a_forked_childs_exit_leaves_the_session_alone(hvd, how):
    before = hvd.allreduce(torch.ones(8), op=hvd.Sum, name="fork.before." + how)
    assert before.eq(hvd.size()).all()

    def child():
        if how == "shutdown_then_exit":
            hvd.shutdown()
        if how == "collective_then_exit":
            assert hvd.rank() >= 0  # the topology may be read
            try:
                hvd.allreduce(torch.ones(8), op=hvd.Sum, name="fork.child")
                os._exit(5)
            except Exception as e:  # noqa: BLE001 - the message is what is checked
                if "forked from a rank" not in str(e):
                    os._exit(6)
        # What an interpreter's exit runs (sys.exit would unwind into pytest here): Python's exit
        # handlers (hvd.torch's), then the C library's exit, which runs libhvd's.
        atexit._run_exitfuncs()
        ctypes.CDLL(None).exit(0)

    assert _fork_and_wait(child) == 0
    assert hvd.is_initialized()
    after = hvd.allreduce(torch.ones(8), op=hvd.Sum, name="fork.after." + how)
    assert after.eq(hvd.size()).all()
