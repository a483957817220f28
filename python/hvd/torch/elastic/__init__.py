"""Elastic training with PyTorch (Horovod 0.28's horovod.torch.elastic), for jobs started with
`hvdrun --min-np N --max-np M` (docs/elastic.md):

    import hvd.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            # loader draws from state.sampler: after a reset, the rest of the epoch, re-split
            for idx, (data, target) in enumerate(loader):
                ...                                          # one step
                state.sampler.record_batch(idx, batch_size)  # idx within this pass
                if idx % 10 == 0:
                    state.commit()                           # save; raise if hosts changed
            state.sampler.set_epoch(state.epoch + 1)         # at the end of the epoch

    train(state)

How the loop restores, resets and syncs: hvd.common.elastic.
"""
from hvd.common.elastic import ObjectState, State, run_fn
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.state import TorchState
from hvd.torch.mpi_ops import init, shutdown


def run(func):
    """Decorator that runs `func(state, *args, **kwargs)` in the elastic loop: the state is
    synced from rank 0 before func runs, and after a failure (HorovodInternalError: the state is
    restored to its last commit) or a membership change (HostsUpdatedInterrupt, raised by
    state.commit()) hvd is re-initialized, `state.on_reset()` runs the reset callbacks, and func
    is called again. A new worker joins at that sync, so func must not be called from inside a
    collective, nor start with one before the state it needs is synced."""
    # Looked up at each reset, not bound now, so that _reset can be replaced (tests).
    return run_fn(func, lambda: _reset())


def _reset():
    shutdown()
    init()


__all__ = ["ElasticSampler", "ObjectState", "State", "TorchState", "run"]
