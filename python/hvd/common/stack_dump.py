"""Where a stalled rank is (docs/reliability.md): hvd.init() registers Python's faulthandler for
the signal the launcher asks a rank's stacks with (HVD_STACK_DUMP_SIGNAL, set by hvdrun's agent),
unless the program or a library handles that signal already. libhvd's own handler for it (a
native stack, which hvd_init installs for C++ programs) is replaced: Python's frames say more."""
import faulthandler
import os
import signal
import sys


_registered_in = None  # the process that registered it (a forked child inherits the handler)


def _handles_signal(signum):
    """Whether this process already catches or ignores `signum`, as the kernel sees it (a handler
    set from C, which Python's signal.getsignal() does not show, included)."""
    try:
        with open("/proc/self/status") as f:
            masks = dict(line.split(":", 1) for line in f if line.startswith(("SigCgt", "SigIgn")))
        bit = 1 << (signum - 1)
        return any(int(m.strip(), 16) & bit for m in masks.values())
    except (OSError, ValueError):
        return signal.getsignal(signum) not in (signal.SIG_DFL, None)


def register(native_signal=None):
    """Lets hvdrun show where a stalled rank is: the launcher asks a stall's culprit for its
    stacks with the signal HVD_STACK_DUMP_SIGNAL names (set by hvdrun's agent), and Python's
    faulthandler writes the stack of every thread to stderr, from a C signal handler, even while
    the main thread is blocked in a collective or in C code. A signal the program (or a library)
    already handles is left to it; libhvd's native stack handler is not such a handler
    (`native_signal`: the C ABI's hvd_native_stack_dump_signal, which names the signal it is the
    handler for; None with a libhvd that has none)."""
    global _registered_in
    value = os.environ.get("HVD_STACK_DUMP_SIGNAL", "")
    if not value or _registered_in is not None:
        return
    _registered_in = os.getpid()
    try:
        signum = int(value)
        if not 0 < signum < signal.NSIG:
            raise ValueError("not a signal number (1 to %d)" % (signal.NSIG - 1))
        ours = native_signal is not None and native_signal() == signum
        if _handles_signal(signum) and not ours:
            return
        err = sys.__stderr__
        fd = err.fileno() if err is not None else 2
        faulthandler.register(signum, file=fd, all_threads=True, chain=False)
    except (ValueError, OSError, RuntimeError, AttributeError) as e:
        sys.stderr.write("hvd: HVD_STACK_DUMP_SIGNAL=%s: %s; a stall will not show this rank's "
                         "stacks\n" % (value, e))
