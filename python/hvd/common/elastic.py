"""Elastic training, the framework-independent part (Horovod 0.28's horovod.common.elastic): the
`State` a training function keeps, `ObjectState` for plain Python values, and `run_fn`, the loop
behind `hvd.torch.elastic.run`.

How a job changes size (hvdrun --min-np/--max-np; docs/elastic.md): the launcher publishes a new
membership generation when a worker fails or a host joins. A worker finds out in one of two ways:

  - a collective fails (a peer died): HorovodInternalError. The loop restores the last committed
    state, resets (hvd.shutdown(); hvd.init(): the new session joins the newest generation) and
    syncs the state from rank 0 before calling the training function again;
  - `State.commit()` (or `check_host_updates()`) sees that the launcher published a generation
    newer than the one this session joined: HostsUpdatedInterrupt, raised on every rank at the
    same commit. The loop resets without restoring (the state was just committed); when the new
    generation only lost workers, the survivors already hold the same state and the sync is
    skipped (`skip_sync`), unless the session the reset joined is not the generation that
    answer was about (a newer one, which may have added a worker, was published meanwhile).

hvdrun --reset-limit is enforced by the launcher, per job, by counting membership generations
(as Horovod's driver does): past it the job fails. The loop counts nothing itself: counted per
process, new workers would start at 0 and a failure without a membership change would count in
one place and not the other. Errors other than the two above propagate, among them the
RuntimeError of a reset's hvd.init() when the job is ending (a worker finished; the launcher
refuses new sessions), so the loop never spins on a job that cannot go on.
"""
import copy
import functools

from hvd.common import basics as _basics
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


def _copy(value):
    """A deep copy, so that changes made after a commit never reach the committed value; an
    object that cannot be copied (a lock, an open file) is kept by reference, as Horovod keeps
    every value."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - any failure to copy means "keep the reference"
        return value


class State(object):
    """State kept in memory on every worker and brought back in step after a reset.

    Args:
        bcast_object: function that broadcasts a Python object from rank 0 and returns it.
        get_rank: function that returns this worker's rank.

    Subclasses implement save() (commit to memory), restore() (back to the last commit) and
    sync() (rank 0's state to every worker).
    """

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions to call after every reset (a worker added or removed), in order; e.g. to
        scale the learning rate with the new hvd.size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by the elastic loop once hvd is initialized again after a reset."""
        for callback in list(self._reset_callbacks):
            callback()

    def commit(self):
        """Saves the state (save()), then raises HostsUpdatedInterrupt when the launcher has
        published a new membership (check_host_updates()). Saving copies the state (from the GPU
        too): commit every few batches rather than every batch, trading the steps lost on a
        failure against the cost per step. In an elastic job it also tells the launcher that
        this worker holds the training state (a shrink by the discovery script waits for it)."""
        self.save()
        self._note_committed()
        self.check_host_updates()

    def _note_committed(self):
        """After a save: in an elastic job, tells the launcher that this worker holds the
        training state (docs/elastic.md "Shrinking")."""
        if _basics.elastic_enabled():
            _basics.elastic_committed()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when the launcher has published a
        membership generation newer than the one this session joined; its `skip_sync` is true
        when the new membership only lost workers. Outside an elastic job it returns at once
        (nothing can change). A collective (a broadcast of rank 0's view) in an elastic job, so
        every rank must call it at the same point."""
        if not _basics.elastic_enabled():
            return
        joined, latest, only_removed = _basics.elastic_generation()
        # The launcher's update reaches the ranks at different moments: if each decided alone,
        # those that saw it would reset while the others wait in their next collective. Rank
        # 0's view decides for all (a rank that saw it first raises at a later commit, with all).
        joined, latest, only_removed = self._bcast_object((joined, latest, only_removed))
        if latest > joined:
            interrupt = HostsUpdatedInterrupt(bool(only_removed))
            # skip_sync holds for generation `latest` only: run_fn compares it with the
            # generation its reset actually joins (a newer one may have added a worker).
            interrupt.generation = latest
            raise interrupt

    def save(self):
        """Saves the state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Goes back to the last committed state, undoing what changed since."""
        raise NotImplementedError()

    def sync(self):
        """Makes every worker's state rank 0's."""
        raise NotImplementedError()


class ObjectState(State):
    """State made of plain Python values, given as keyword arguments and kept as attributes of
    the same names (`state.epoch`). save() keeps copies of the attributes, restore() puts copies
    of the saved values back, and sync() broadcasts the saved values from rank 0 (uncommitted
    changes are replaced everywhere, rank 0 included).

    Args:
        bcast_object: function that broadcasts a Python object from rank 0 and returns it.
        get_rank: function that returns this worker's rank.
        kwargs: the values to keep.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._bcast_object = bcast_object
        self._saved_state = {name: _copy(value) for name, value in kwargs.items()}
        for name, value in kwargs.items():  # the objects given, as Horovod
            setattr(self, name, value)
        super(ObjectState, self).__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: _copy(getattr(self, name)) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        # Copies: changing an attribute in place must not change what restore() goes back to.
        for name, value in self._saved_state.items():
            setattr(self, name, _copy(value))


def run_fn(func, reset):
    """Wraps `func(state, *args, **kwargs)` in the elastic loop: sync the state (unless the last
    interrupt said to skip it), call func; on HorovodInternalError restore the state, on
    HostsUpdatedInterrupt keep it; then `reset()` (re-initialize hvd), `state.on_reset()` and
    go round again. func's return value is returned; any other exception of func or
    state.sync() propagates, and so does every exception of reset() (e.g. hvd.init() refusing a
    new session because a worker finished and the job is ending): the loop never retries it."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            generation = None  # the generation skip_sync was decided for, when known
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                generation = getattr(e, "generation", None)
            reset()
            if skip_sync and generation is not None and _joined_generation() != generation:
                # The reset joined a newer generation than the one that only lost workers: it
                # may have added one, which syncs first thing, so the survivors must too. The
                # joined generation is the same on every rank of the new session, and every
                # survivor has the same `generation` (rank 0's answer), so all decide alike.
                skip_sync = False
            state.on_reset()
    return wrapper


def _joined_generation():
    """The membership generation the current session joined (local: no collective)."""
    return _basics.elastic_generation()[0]
