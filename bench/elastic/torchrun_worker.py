"""One worker of bench/elastic/recovery.py's torchrun side (started by torchrun, never by hand):
the loop of tests/cli/elastic_program.py on torch.distributed (gloo): a summed allreduce of one
element per step. On torchrun's first run, local rank --die-rank kills itself with SIGKILL at
step --die-at-step; torchrun then restarts every worker (its elastic restart), and each prints
when its first allreduce of the restarted group completed."""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--die-rank", type=int, default=3)
p.add_argument("--die-at-step", type=int, default=5)
p.add_argument("--step-sleep", type=float, default=0.01)
args = p.parse_args()

restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
for step in range(args.steps):
    if restart == 0 and rank == args.die_rank and step == args.die_at_step:
        print("worker dies at step %d at %.6f" % (step, time.time()), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    t = torch.ones(1)
    dist.all_reduce(t)
    if step == 0 and restart > 0:
        print("rank %d first allreduce after restart at %.6f" % (rank, time.time()), flush=True)
    time.sleep(args.step_sleep)
dist.destroy_process_group()
