"""A job whose rank 1 stalls outside hvd (tests/cli/hvdrun_stack_dump_test.cc): after a first
allreduce it forks a child (as a DataLoader does: the child inherits hvd.torch's stack-dump
handler) and then sits in a function whose name the test looks for in its stacks, while rank 0
waits in the next allreduce. Every wait is bounded: --stall-timeout ends the job first."""
import os
import sys
import time

import torch

import hvd.torch as hvd


def forked_helper_waits():
    time.sleep(120)


def stuck_in_the_data_loader():
    time.sleep(120)


hvd.init()
t = torch.ones(4)
hvd.allreduce(t, name="first")
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
