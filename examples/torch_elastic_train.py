"""Elastic training with hvd.torch as a Horovod Elastic script is written (docs/elastic.md):
hvd.elastic.run, a TorchState holding the model, optimizer, sampler and epoch, an ElasticSampler
under a DataLoader, commits every few batches, a reset callback that rescales the learning rate.
A linear regression on synthetic data, so that a run checks itself: every rank must end with
the same parameters (bit for bit), close to the true ones.

  hvdrun -np 4 --min-np 2 python3 examples/torch_elastic_train.py [--epochs 3]
         [--die-worker ID --die-at-batch B]   (that worker kills itself, once, mid-training)

Exits non-zero when the ranks disagree or the fit is poor. Runs as `import horovod.torch` too
(--module horovod.torch, with build/python_compat on PYTHONPATH).
"""
import argparse
import importlib
import os
import signal
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--die-worker", type=int, default=-1)
p.add_argument("--die-at-batch", type=int, default=5)
p.add_argument("--module", default="hvd.torch")
args = p.parse_args()
hvd = importlib.import_module(args.module)

torch.manual_seed(0)
features = 8
true_w = torch.randn(features, 1)
x = torch.randn(2048, features)
dataset = torch.utils.data.TensorDataset(x, x @ true_w + 0.5)

hvd.init()
torch.manual_seed(1 + hvd.rank())  # ranks start apart; the first sync makes them equal
model = torch.nn.Linear(features, 1)
base_lr = 0.01
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size()),
                                     named_parameters=model.named_parameters())
sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True)
loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0)
worker = int(os.environ.get("HVD_WORKER_ID", "-1"))


def on_reset():
    for group in optimizer.param_groups:
        group["lr"] = base_lr * hvd.size()
    print("worker %d re-formed: rank %d of %d" % (worker, hvd.rank(), hvd.size()), flush=True)


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    for state.epoch in range(state.epoch, args.epochs):
        for i, (xb, yb) in enumerate(loader):  # after a reset: what is left of the epoch
            if worker == args.die_worker and state.epoch == 0 and i == args.die_at_batch:
                print("worker %d dies at batch %d" % (worker, i), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
            state.sampler.record_batch(i, args.batch_size)
            if i % 10 == 9:
                state.commit()
        sampler.set_epoch(state.epoch + 1)  # at the end of the epoch, not its start
        state.commit()


train(state)
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
rank0 = hvd.broadcast(flat.clone(), root_rank=0, name="final")
error = (model.weight.detach().reshape(-1, 1) - true_w).abs().max().item()
print("worker %d final: rank %d of %d, error %.4f, same as rank 0: %s" %
      (worker, hvd.rank(), hvd.size(), error, bool(torch.equal(flat, rank0))), flush=True)
hvd.shutdown()
sys.exit(0 if torch.equal(flat, rank0) and error < 0.1 else 1)
