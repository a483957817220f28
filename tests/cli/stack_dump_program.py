"""Jobs for tests/cli/hvdrun_stack_dump_test.cc. Every wait is bounded.

Default: rank 1 stalls outside hvd. After a first allreduce it forks a child (as a DataLoader
does: the child inherits hvd.torch's stack-dump handler) and then sits in a function whose name
the test looks for in its stacks, while rank 0 waits in the next allreduce (--stall-timeout ends
the job first).

--loop: every rank allreduces in a loop until the file "stop" appears in the working directory
(at most 60 s), so that hvdrun's SIGQUIT finds them in training_step_loop.

--crossed: rank 0 reduces 'a' then 'b', the others 'b' then 'a' (synchronous calls): the ranks
wait on each other until --stall-timeout ends the job."""
import os
import sys
import time

import torch

import hvd.torch as hvd


def forked_helper_waits():
    time.sleep(120)


def stuck_in_the_data_loader():
    time.sleep(120)


def training_step_loop(t):
    print("rank %d looping" % hvd.rank(), flush=True)
    deadline = time.monotonic() + 60
    while True:
        # Every rank decides alike (a collective on the file's presence and its own deadline), so
        # all stop together.
        done = os.path.exists("stop") or time.monotonic() >= deadline
        if hvd.allreduce(torch.tensor([1.0 if done else 0.0]), name="stop", op=hvd.Max).item() > 0:
            return
        hvd.allreduce(t, name="step")
        time.sleep(0.01)


hvd.init()
t = torch.ones(4)
hvd.allreduce(t, name="first")
if "--loop" in sys.argv:
    training_step_loop(t)
    sys.exit(0)
if "--crossed" in sys.argv:
    for name in ["a", "b"] if hvd.rank() == 0 else ["b", "a"]:
        hvd.allreduce(t, name=name)
    sys.exit(0)
if hvd.rank() == 1:
    child = os.fork()
    if child == 0:
        forked_helper_waits()
        os._exit(0)
    with open("child.pid", "w") as f:
        f.write(str(child))
    print("rank 1 goes to load data", flush=True)
    stuck_in_the_data_loader()
hvd.allreduce(t, name="second")
sys.exit(0)
