"""hvd.init() registers the stack dump that hvdrun's stall diagnosis asks for (the signal
HVD_STACK_DUMP_SIGNAL names, set by hvdrun's agent; docs/reliability.md): the rank then catches
it, and the signal writes every Python thread's stack to stderr while the program goes on. A
handler the program set for that signal itself (from Python or from C) is kept; a malformed value
is said, not raised.
The end-to-end path (a stall, the launcher's request, the agent's signal) is
tests/cli/hvdrun_stack_dump_test.cc."""
import os
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("hvd_session")


def _catches(signum):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


@pytest.mark.skipif("HVD_STACK_DUMP_SIGNAL" not in os.environ, reason="hvdrun sets it")
def test_a_rank_under_hvdrun_catches_the_stack_dump_signal():
    assert _catches(int(os.environ["HVD_STACK_DUMP_SIGNAL"]))


# Each case in a fresh interpreter: the registration is once per process.
_PROGRAM = r"""
import os, signal, sys
from hvd.common import stack_dump
mode = sys.argv[1]
if mode == "own":
    signal.signal(40, lambda *a: print("the program's own handler", flush=True))
if mode == "ignored_in_c":  # set where Python's signal module does not see it
    import ctypes
    ctypes.CDLL(None).signal(40, ctypes.c_void_p(1))  # SIG_IGN
if mode == "init":  # libhvd's hvd_init installs its native handler; the binding replaces it
    import hvd.torch as hvd
    hvd.init()
else:
    stack_dump.register()
def where_the_rank_is():
    os.kill(os.getpid(), 40)
if mode != "bad":
    where_the_rank_is()
print("went on", flush=True)
"""


def _run(mode, value="40"):
    # A job of its own (one process), not a rank of the job running these tests; what says which
    # libraries to load is kept (local_launch's rule).
    from local_launch import rank_env
    env = {k: v for k, v in rank_env(0, 1, "").items()
           if not k.startswith(("HVD_RANK", "HVD_SIZE", "HVD_RENDEZVOUS"))}
    env["HVD_STACK_DUMP_SIGNAL"] = value
    return subprocess.run([sys.executable, "-c", _PROGRAM, mode], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_signal_writes_the_stacks_and_the_program_goes_on():
    r = _run("plain")
    assert r.returncode == 0, r.stderr
    assert "most recent call first" in r.stderr
    assert "in where_the_rank_is" in r.stderr
    assert "went on" in r.stdout


def test_hvd_init_gives_pythons_stacks_not_the_native_ones():
    r = _run("init")
    assert r.returncode == 0, r.stderr
    assert "in where_the_rank_is" in r.stderr
    assert "hvd: native stack" not in r.stderr
    assert "went on" in r.stdout


def test_a_handler_of_the_programs_own_is_kept():
    r = _run("own")
    assert r.returncode == 0, r.stderr
    assert "the program's own handler" in r.stdout
    assert "most recent call first" not in r.stderr


def test_a_disposition_set_from_c_is_kept():
    r = _run("ignored_in_c")
    assert r.returncode == 0, r.stderr
    assert "most recent call first" not in r.stderr
    assert "went on" in r.stdout


def test_a_malformed_signal_is_said():
    r = _run("bad", value="forty")
    assert r.returncode == 0, r.stderr
    assert "HVD_STACK_DUMP_SIGNAL=forty" in r.stderr
    assert "went on" in r.stdout
