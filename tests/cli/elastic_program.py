"""A Horovod elastic training script (hvd.elastic.run, TorchState, commit) for the elastic tests
and the recovery benchmark (tests/cli/hvdrun_elastic_test.cc, bench/elastic/recovery.py).

Each step every rank contributes 1 to a summed allreduce and adds the result to the model's one
weight, so after the run the weight is the sum over steps of the job's size at that step. A
worker told to die does so at the start of a step (before its allreduce, after the previous
commit); the survivors' allreduce fails, they restore the commit and go on smaller. So a run of
N steps in which 4 workers became 3 at step K ends with weight 4*K + 3*(N-K), exactly: the test
checks the restored state, the new size and that no step was lost or done twice.
"""
import argparse
import os
import signal
import sys
import time

import torch

import hvd.torch as hvd

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=20)
p.add_argument("--die-worker", action="append", default=[],
               help="ID (dies at --die-at-step) or ID@STEP; repeatable")
p.add_argument("--die-at-step", type=int, default=5)
p.add_argument("--die-code", type=int, default=-9,
               help="exit code, or -9 for kill -9, -19 to hang (SIGSTOP itself), -20 to sleep "
                    "in user code")
p.add_argument("--step-sleep", type=float, default=0.01)
p.add_argument("--fail-workers-from", type=int, default=-1,
               help="workers with this id or higher exit 3 at once (a host whose workers fail)")
p.add_argument("--late-worker", type=int, default=-1,
               help="this worker sleeps --late-seconds before hvd.init() (a slow start)")
p.add_argument("--late-seconds", type=float, default=120)
p.add_argument("--stop-worker", type=int, default=-1,
               help="this worker SIGSTOPs itself --stop-after seconds after it starts, wherever "
                    "it is (in hvd.init(), waiting for a newcomer)")
p.add_argument("--stop-after", type=float, default=4)
p.add_argument("--post-sleep", type=float, default=0,
               help="seconds between the end of training and the exit (evaluation, saving)")
p.add_argument("--report-first", action="store_true",
               help="print when this process's first allreduce completed")
args = p.parse_args()

worker = int(os.environ.get("HVD_WORKER_ID", "-1"))
dies_at = {}  # worker id -> the step it dies at
for d in args.die_worker:
    w, _, step = d.partition("@")
    dies_at[int(w)] = int(step) if step else args.die_at_step
if 0 <= args.fail_workers_from <= worker:
    print("worker %d fails at start" % worker, flush=True)
    sys.exit(3)
if worker == args.late_worker:
    time.sleep(args.late_seconds)
if worker == args.stop_worker:
    import threading
    threading.Timer(args.stop_after, lambda: os.kill(os.getpid(), signal.SIGSTOP)).start()
hvd.init()
first = {"done": False}
model = torch.nn.Linear(1, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(0.0)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)
recovering = {"since": None}


def on_reset():
    recovering["since"] = time.time()
    print("worker %d reset: rank %d/%d at step %d" % (worker, hvd.rank(), hvd.size(), state.step),
          flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < args.steps:
        if dies_at.get(worker) == state.step:
            print("worker %d dies at step %d at %.6f" % (worker, state.step, time.time()),
                  flush=True)
            if args.die_code == -9:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.die_code == -19:  # hangs: never exits, never answers its peers
                os.kill(os.getpid(), signal.SIGSTOP)
                time.sleep(3600)
            if args.die_code == -20:  # stuck in user code: hvd's own thread still answers
                time.sleep(3600)
            os._exit(args.die_code)
        total = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="one")
        if args.report_first and not first["done"]:
            first["done"] = True
            print("worker %d first allreduce at %.6f" % (worker, time.time()), flush=True)
        if recovering["since"] is not None:
            print("worker %d first allreduce after reset at %.6f" % (worker, time.time()),
                  flush=True)
            recovering["since"] = None
        with torch.no_grad():
            model.weight += total
        state.step += 1
        state.commit()
        time.sleep(args.step_sleep)


train(state)
print("worker %d final: rank %d/%d weight %g steps %d" %
      (worker, hvd.rank(), hvd.size(), model.weight.item(), state.step), flush=True)
time.sleep(args.post_sleep)
hvd.shutdown()
