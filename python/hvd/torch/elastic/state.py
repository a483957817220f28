"""TorchState (Horovod 0.28's horovod.torch.elastic.TorchState): the state of a PyTorch training
process, with a handler per kind of object (model, optimizer, LR scheduler, ElasticSampler) that
saves, restores and syncs it; other keyword arguments are plain values (ObjectState)."""
import copy

import torch

from hvd.common.elastic import ObjectState
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state, \
    broadcast_parameters
from hvd.torch.mpi_ops import rank


class TorchState(ObjectState):
    """State of a PyTorch training process.

    Args:
        model: a torch.nn.Module (optional).
        optimizer: a torch.optim.Optimizer (optional).
        kwargs: more values, kept as attributes of the same names. Models, optimizers, LR
            schedulers and ElasticSamplers among them get their handler (any number of each);
            anything else is a plain Python value (ObjectState).

    save() keeps deep copies of every state_dict(); restore() loads them back; sync() broadcasts
    models and optimizers from rank 0 (broadcast_parameters, broadcast_optimizer_state), then
    schedulers, samplers and the plain values. commit() saves, then gathers every rank's
    processed ElasticSampler samples (one collective, after the local snapshot), then checks
    for a new membership. Assigning a new object to a handled attribute
    (`state.model = other`) makes it the one tracked, and saves it.
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super(TorchState, self).__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def commit(self):
        """Saves the state (save(): local copies only), merges the samplers' processed samples
        over the ranks, tells the launcher it committed (elastic jobs), then checks for a new
        membership (check_host_updates())."""
        self.save()
        self._merge_samplers()
        self._note_committed()
        self.check_host_updates()

    def save(self):
        # Local copies only, no collective (as Horovod): a peer failing in the middle cannot
        # leave some handlers at this commit and others at the previous one.
        for handler in self._handlers.values():
            handler.save()
        super(TorchState, self).save()

    def _merge_samplers(self):
        # Every rank records only its own samples; the job processed their union. Merged here,
        # after save() has snapshotted everything, not inside save(): one allgather for all the
        # samplers, whose result each rank adds to its live sampler and to the snapshot just
        # taken. The union only holds samples of this same commit (every rank commits at the
        # same step), so a rank whose allgather fails keeps its own samples and one whose
        # allgather succeeds keeps the union: either is a consistent snapshot of this commit,
        # and restore() + sync() (which unions again) after the failure agree on every rank.
        # Not at sync(): a reset that skips the sync (workers only removed) re-splits the live
        # samplers at once, which needs the same processed samples on every survivor. Not in
        # check_host_updates(): it may be called between commits, when the live samples are
        # not the saved ones.
        samplers = [h for h in self._handlers.values() if isinstance(h, SamplerStateHandler)]
        if not samplers:
            return
        gathered = allgather_object([h.value.processed_indices for h in samplers])
        for i, handler in enumerate(samplers):
            handler.merge_processed(_union(mine[i] for mine in gathered))

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super(TorchState, self).restore()

    def sync(self):
        for handler in self._handlers.values():
            handler.sync()
        super(TorchState, self).sync()

    def on_reset(self):
        # Handlers first (samplers split the rest of the epoch over the new size), so that the
        # user's callbacks see the new split.
        for handler in self._handlers.values():
            handler.on_reset()
        super(TorchState, self).on_reset()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers and name in self.__dict__:
            handlers[name].set_value(value)
        super(TorchState, self).__setattr__(name, value)


class StateHandler(object):
    """Saves, restores and syncs one object of a TorchState. Subclasses set `_snapshot()` (a
    copy of the object's state, taken without any collective) and `restore()`/`sync()`."""

    def __init__(self, value):
        self.value = value
        self._saved = self._snapshot()

    def _snapshot(self):
        return copy.deepcopy(self.value.state_dict())

    def save(self):
        self._saved = self._snapshot()

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        raise NotImplementedError()

    def on_reset(self):
        """After a reset, before the sync (or instead of it, when the sync is skipped)."""

    def set_value(self, value):
        # No collective here: an assignment is not known to happen on every rank at once.
        self.value = value
        self._saved = self._snapshot()


class ModelStateHandler(StateHandler):
    def sync(self):
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class OptimizerStateHandler(StateHandler):
    def sync(self):
        broadcast_optimizer_state(self.value, root_rank=0)


class LRSchedulerStateHandler(StateHandler):
    def sync(self):
        self.value.load_state_dict(broadcast_object(self.value.state_dict()))


class SamplerStateHandler(StateHandler):
    """An ElasticSampler: its epoch and the samples processed this epoch, by any rank."""

    def merge_processed(self, indices):
        """Takes `indices` (every rank's processed samples at the commit just saved) into the
        live sampler and into the saved state: a reset that skips the sync then splits the same
        remaining samples on every rank, and a worker dying after this commit does not get its
        samples processed twice. Local; TorchState.commit() gathers the indices."""
        self.value.processed_indices = set(indices)
        self._saved["processed_indices"] = set(indices)

    def sync(self):
        state = self.value.state_dict()
        state["processed_indices"] = _union(allgather_object(self.value.processed_indices))
        self.value.load_state_dict(broadcast_object(state))

    def on_reset(self):
        self.value.reset()


def _union(sets):
    return set().union(*sets)


_lr_scheduler_base = getattr(torch.optim.lr_scheduler, "LRScheduler", None) or \
    torch.optim.lr_scheduler._LRScheduler

# (type, handler class): the first type an object is an instance of gives its handler.
_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (_lr_scheduler_base, LRSchedulerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handler(value):
    for handler_type, handler_cls in _handler_registry:
        if isinstance(value, handler_type):
            return handler_cls(value)
    return None


def _get_handlers(kwargs):
    handlers, plain = {}, {}
    for name, value in kwargs.items():
        handler = _get_handler(value)
        if handler is not None:
            handlers[name] = handler
        else:
            plain[name] = value
    return handlers, plain
