"""A rank of a two-rank job started by tests/python/test_peer_failure.py.

kill:      rank 1 dies by SIGKILL while rank 0 waits in an allreduce; rank 0 must get
           HorovodInternalError (not hang, not crash), and so must later operations.
interrupt: rank 0 waits in synchronize() for an allreduce rank 1 submits 2 s late; the driver
           sends rank 0 SIGINT meanwhile: KeyboardInterrupt must arrive at once, and the same
           handle must still complete afterwards.
interrupt-sync[-python|-ctypes]:SECONDS: the same in a synchronous hvd.allreduce (the call that
           submits it waits), interrupted by rank 0 itself after SECONDS (SIGALRM raising
           KeyboardInterrupt: 0.03 lands in the call's first 100 ms, 0.5 in the wait after it),
           through hvd.common._fastcall's tensor path, its Python path (-python) or ctypes
           alone (-ctypes): the interrupted operation must be parked in the
           handle table with its buffers (it is still running), and the job goes on (rank 0's
           next allreduce gets the right sum, so it ran after the interrupted one).
"""
import os
import signal
import sys
import time

import torch
import hvd.torch as hvd

mode = sys.argv[1]
hvd.init()
x = torch.ones(1000)
hvd.allreduce(x, name="warmup")  # both ranks are connected
print("ready", flush=True)

if mode == "kill":
    if hvd.rank() == 1:
        time.sleep(0.5)  # let rank 0 enter the allreduce first
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        hvd.allreduce(x, name="never.completes")
    except hvd.HorovodInternalError as e:
        print("HorovodInternalError after %.2f s: %s" % (time.monotonic() - start, e), flush=True)
        try:
            hvd.allreduce(x, name="after")
        except hvd.HorovodInternalError as e2:
            print("later: HorovodInternalError: %s" % e2, flush=True)
            sys.exit(0)
        sys.exit(3)
    print("allreduce returned without an error", flush=True)
    sys.exit(2)

if mode == "interrupt":
    if hvd.rank() == 1:
        time.sleep(2.0)
        print("rank 1 result %s" % hvd.allreduce(x, name="late", op=hvd.Sum)[0].item(), flush=True)
        sys.exit(0)
    h = hvd.allreduce_async(x, name="late", op=hvd.Sum)
    start = time.monotonic()
    try:
        hvd.synchronize(h)
        print("synchronize returned before the interrupt", flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.2f s" % (time.monotonic() - start), flush=True)
    print("result %s" % hvd.synchronize(h)[0].item(), flush=True)
    sys.exit(0)

if mode.startswith("interrupt-sync"):
    if hvd.rank() == 1:
        time.sleep(2.0)
        hvd.allreduce(x, name="late", op=hvd.Sum)
        print("rank 1 result %s" % hvd.allreduce(x * 3, name="after", op=hvd.Sum)[0].item(),
              flush=True)
        sys.exit(0)
    from hvd.torch import _allreduce, _handles
    variant = mode.split(":")[0]
    if variant.endswith("-ctypes"):
        _allreduce._fast = _allreduce._tensor_path = None
    elif variant.endswith("-python"):
        _allreduce._tensor_path = None

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, interrupt)
    parked_before = len(_handles._table)
    signal.setitimer(signal.ITIMER_REAL, float(mode.split(":")[1]))
    start = time.monotonic()
    try:
        hvd.allreduce(x, name="late", op=hvd.Sum)
        print("allreduce returned before the interrupt", flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.2f s" % (time.monotonic() - start), flush=True)
    parked = list(_handles._table.values())[parked_before:]
    # The tensor path parks (ptr, (input, output), None); the Python path a finish function.
    print("parked %d by the %s path" % (len(parked), "C" if parked and parked[-1][2] is None
                                                      else "Python"), flush=True)
    print("result %s" % hvd.allreduce(x * 3, name="after", op=hvd.Sum)[0].item(), flush=True)
    sys.exit(0)
