"""Model, optimizer and object helpers (Horovod's horovod.torch.functions)."""
import collections
import pickle

import torch

from hvd.common.basics import rank
from hvd.common.exceptions import HorovodInternalError
from hvd.common.process_sets import global_process_set
from hvd.torch._collectives import allgather_bytes, broadcast_bytes, broadcast_async_
from hvd.torch._handles import root_index as _root_index
from hvd.torch._handles import synchronize


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with those of `root_rank`, in place.

    params: model.state_dict() (a dict: broadcast in sorted key order), model.named_parameters()
    or model.parameters() (a list or any iterable of tensors or (name, tensor) pairs). Every rank
    must pass the same parameters in the same order."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, (list, tuple)) or (not isinstance(params, (str, bytes)) and
                                                hasattr(params, "__iter__")):
        params = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        raise ValueError("invalid params of type: %s" % type(params))

    handles = [broadcast_async_(p, root_rank, name, process_set=process_set)
               for name, p in params]
    for handle in handles:
        synchronize(handle)


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Overwrites every rank's optimizer state (and hyperparameters such as the learning rate) with
    those of `root_rank`. Works on a plain torch optimizer or a DistributedOptimizer.

    An optimizer whose state is created lazily (Adam, SGD with momentum... before their first
    step) gets it created first, as Horovod does, by one step on zero gradients; unlike Horovod,
    the parameters and gradients are then put back as they were, so that the dummy step cannot
    move them (it would with weight decay)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")

    state_dict = optimizer.state_dict()
    if len(state_dict["state"]) == 0:
        _initialize_state(optimizer)
        state_dict = optimizer.state_dict()
    # Still empty: a stateless optimizer (plain SGD); hyperparameters are broadcast all the same.

    tensors = []
    scalars = {}
    callbacks = {}
    occurrences = collections.defaultdict(int)

    def assign_state(pid, name):
        def assign(v):
            state_dict["state"][pid][name] = v
        return assign

    def assign_option(index, key):
        def assign(v):
            optimizer.param_groups[index][key] = v
        return assign

    for index, group in enumerate(state_dict["param_groups"]):
        for key, value in group.items():
            if key == "params":
                continue
            k = "%s.%d" % (key, index)
            scalars[k] = value
            callbacks[k] = assign_option(index, key)
        for pid in group["params"]:
            if pid not in state_dict["state"]:
                continue  # no state (a parameter without requires_grad)
            for name, value in state_dict["state"][pid].items():
                occurrences[name] += 1
                k = "%s.%d" % (name, occurrences[name])
                if torch.is_tensor(value):
                    tensors.append((k, value))
                else:
                    scalars[k] = value
                    callbacks[k] = assign_state(pid, name)

    # state_dict()["state"] holds the optimizer's own state tensors: broadcast in place.
    broadcast_parameters(tensors, root_rank, process_set=process_set)
    scalars = broadcast_object(scalars, root_rank, name="optimizer_state.scalars",
                               process_set=process_set)
    for k, v in scalars.items():
        callbacks[k](v)


def _initialize_state(optimizer):
    """Creates a lazily initialized optimizer's state with one step on zero gradients (the base
    optimizer's step: a DistributedOptimizer's would start allreduces), then restores parameters
    and gradients."""
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                saved.append((p, p.detach().clone(), p.grad))
                grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam):
                    grad = grad.to_sparse()
                p.grad = grad
    base_step = getattr(optimizer, "_hvd_base_step", None)
    try:
        if base_step is not None:
            base_step()
        else:
            optimizer.step()
    finally:
        with torch.no_grad():
            for p, data, grad in saved:
                p.copy_(data)
                p.grad = grad


# What a rank sends in place of its pickle when pickle refuses its object, followed by the reason:
# it still takes part in the collective, so the other ranks fail with that reason instead of
# waiting for bytes that never come. A pickle (protocol 2 or later) starts with the PROTO opcode.
_PICKLE_FAILED = b"hvd:pickle-failed\0"


def _pickled(obj):
    """(the bytes this rank contributes, pickle's exception or None)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # PicklingError, or AttributeError/TypeError for local objects
        why = "%s: %s" % (type(e).__name__, e)
        return _PICKLE_FAILED + why.encode("utf-8", "replace")[:4096], e


def _pickle_failure(what, job_rank, data):
    why = data[len(_PICKLE_FAILED):].decode("utf-8", "replace")
    return ValueError(
        "%s: rank %d could not pickle its object (%s); hvd sends objects with pickle, not "
        "cloudpickle, so lambdas, local functions and local classes cannot be sent: send data "
        "pickle takes (a module-level function or class, a state_dict)" % (what, job_rank, why))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns `obj` of rank `root_rank` on every rank of the set (pickled, sent in one byte
    broadcast: the size needs no separate exchange). Example:

        state_dict = hvd.broadcast_object(optimizer.state_dict(), 0)

    Without a name, calls are numbered (every rank calls in the same order). Horovod names them
    after type(obj), which hangs when the other ranks pass a placeholder of another type
    (`obj if hvd.rank() == 0 else None`); numbering does not. When pickle refuses the root's
    object, the root raises pickle's error and every other rank a ValueError saying so.
    """
    root_rank = _root_index(root_rank, "broadcast_object")
    is_root = rank() == root_rank
    data, error = _pickled(obj) if is_root else (b"", None)
    received = broadcast_bytes(data, root_rank, name, process_set)
    if error is not None:
        raise error
    if is_root:
        return obj
    if received.startswith(_PICKLE_FAILED):
        raise _pickle_failure("broadcast_object", root_rank, received)
    return pickle.loads(received)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj` (pickled), in the set's rank order. Objects may
    differ in size and type between ranks; without a name, calls are numbered.

    A rank that has joined (hvd.join()) contributes no bytes; the other ranks then get
    HorovodInternalError naming it, as broadcast_object does for a joined root. A rank whose
    object pickle refuses raises pickle's error, and every other rank a ValueError naming it."""
    data, error = _pickled(obj)
    gathered = allgather_bytes(data, name, process_set)
    ranks = process_set.ranks
    # Job ranks, as the runtime's messages name them.
    job_rank = (lambda k: ranks[k]) if ranks and len(ranks) == len(gathered) else (lambda k: k)
    if error is not None:
        raise error
    failed = [k for k, b in enumerate(gathered) if b.startswith(_PICKLE_FAILED)]
    if failed:
        raise _pickle_failure("allgather_object", job_rank(failed[0]), gathered[failed[0]])
    # A pickle is never empty: an empty contribution is a joined rank's.
    empty = [job_rank(k) for k, b in enumerate(gathered) if len(b) == 0]
    if empty:
        raise HorovodInternalError(
            "allgather_object: %s %s joined and contributed nothing; call allgather_object on "
            "every rank before hvd.join()" % (
                "rank %d" % empty[0] if len(empty) == 1
                else "ranks " + ", ".join(str(r) for r in empty),
                "has" if len(empty) == 1 else "have"))
    return [pickle.loads(b) for b in gathered]
