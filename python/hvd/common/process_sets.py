"""Process sets (Horovod 0.23+): subsets of the job's ranks that run collectives among themselves.

    even = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[even])            # or hvd.init(process_sets="dynamic") and
                                             #    even = hvd.add_process_set([0, 2]) later
    if even.included():
        hvd.allreduce(t, process_set=even)

Ranks are always job ranks (hvd.rank()); a set keeps them sorted. Every collective takes a
`process_set` (default: global_process_set, id 0, every rank).
"""
import ctypes as _ctypes
import weakref as _weakref

from hvd.common import basics as _basics
from hvd.common import exceptions as _exc
from hvd.common.util import is_iterable


class ProcessSet:
    """A set of ranks that run collectives together. Pass it to hvd.init(process_sets=[...]) or
    hvd.add_process_set(); once registered, `process_set_id` is set."""
    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        if isinstance(ranks_or_comm, (str, bytes)) or not is_iterable(ranks_or_comm):
            raise ValueError("ProcessSet should be initialized with a list of process ranks (hvd "
                             "has no MPI, so no mpi4py communicator); got %r" % (ranks_or_comm,))
        ranks = sorted(ranks_or_comm)
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of integer ranks; got %r"
                             % (ranks_or_comm,))
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None when it is not registered."""
        if self.process_set_id is None:
            return None
        return _process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set, or None when it is not registered. ValueError when
        this process is not a member. Collectives still name roots by job rank (hvd.rank())."""
        if self.process_set_id is None:
            return None
        return _process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is a member, or None when the set has no ranks yet."""
        if self.ranks is None:
            return None
        return _basics.rank() in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


def _temp_process_set_object(process_set_id):
    """A ProcessSet for a known id (internal use)."""
    ps = ProcessSet.__new__(ProcessSet)
    ps.process_set_id = process_set_id
    return ps


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# Every set given an id in this session. A new session numbers its sets afresh, so an object kept
# across shutdown() and init() would name another set (or none): it is invalidated instead.
_registered = _weakref.WeakSet()


def _registered_as(ps, ps_id):
    ps.process_set_id = ps_id
    _registered.add(ps)
    return ps


def _forget_sets():
    for ps in list(_registered):
        ps._invalidate()
    _registered.clear()


_basics.add_init_hook(_forget_sets)


def _init_process_sets(process_set_list):
    """After init: gives each passed set its id (a duplicate of an earlier entry is invalidated)
    and fills the global set's ranks."""
    id_to_ranks = _get_process_set_ids_and_ranks()
    ranks_to_id = {tuple(r): i for i, r in id_to_ranks.items()}
    # First: a duplicate below raises with hvd initialized, whose global set must be whole then too.
    global_process_set.ranks = list(id_to_ranks[0])
    seen = {0}
    for idx, ps in enumerate(process_set_list):
        ps_id = ranks_to_id.get(tuple(ps.ranks))
        if ps_id is None:
            raise ValueError(
                "process_sets entry %d (%s) is not registered: hvd was initialized already, so "
                "process sets passed to a later hvd.init() are not added; use "
                "hvd.add_process_set() with dynamic process sets" % (idx, ps))
        if ps_id in seen:
            ps._invalidate()
            raise ValueError("hvd could not be initialized because process_sets entry number %d "
                             "is a duplicate: %s (of %s; hvd is initialized all the same, with "
                             "the sets before it: pass each set once, and not the job's ranks, "
                             "which are the global set)"
                             % (idx, ps, "the global set" if ps_id == 0 else
                                _entry_with_id(process_set_list[:idx], ps_id)))
        _registered_as(ps, ps_id)
        seen.add(ps_id)


def _entry_with_id(process_set_list, ps_id):
    """'entry K' for the first set of the list with the id ('an earlier entry': the same object
    passed twice, whose id is gone)."""
    k = next((k for k, ps in enumerate(process_set_list) if ps.process_set_id == ps_id), None)
    return "an earlier entry" if k is None else "entry %d" % k


def add_process_set(process_set):
    """Registers a new set after init and returns it (a ProcessSet, or a list of ranks to make one).
    Collective: every rank of the job must call it with the same ranks. Needs dynamic process
    sets (hvd.init(process_sets="dynamic") or HOROVOD_DYNAMIC_PROCESS_SETS=1). ValueError when a
    set with these ranks exists."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    ps_id = _add_process_set_impl(process_set.ranks)
    if ps_id is None:
        raise ValueError("Attempted to add a duplicate process set: %s" % process_set)
    return _registered_as(process_set, ps_id)


def remove_process_set(process_set):
    """Removes a set added before (collective over the job, like add_process_set) and invalidates
    the object. False for the global set, an unregistered set, or one that does not exist."""
    ps_id = process_set.process_set_id
    if ps_id is None or ps_id == 0:
        return False
    process_set._invalidate()
    return _remove_process_set_impl(ps_id) is not None


def process_set_by_id(process_set_id):
    """A ProcessSet for a registered id (e.g. one from HVD_PROCESS_SETS)."""
    if process_set_id == 0:
        return global_process_set
    return _registered_as(ProcessSet(_process_set_ranks(process_set_id)), process_set_id)


def process_set_ids():
    """Every registered set's id, increasing."""
    return sorted(_get_process_set_ids_and_ranks())


# ---- the C ABI's process-set calls ------------------------------------------------------------

_lib = _basics.lib
_NOT_INITIALIZED = _basics._NOT_INITIALIZED


def _process_set_size(process_set_id):
    if not _basics.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    n = _lib.hvd_process_set_size(int(process_set_id))
    if n < 0:
        raise ValueError("Process set %d does not exist or has not been registered."
                         % process_set_id)
    return n


def _process_set_rank(process_set_id):
    _process_set_size(process_set_id)  # raises for "not initialized" and "unknown set"
    r = _lib.hvd_process_set_rank(int(process_set_id))
    if r < 0:
        raise ValueError("Process is not part of provided process set (id %d)." % process_set_id)
    return r


def _process_set_ranks(process_set_id):
    n = _process_set_size(process_set_id)
    buf = (_ctypes.c_int * max(1, n))()
    got = _lib.hvd_process_set_ranks(int(process_set_id), buf, n)
    if got < 0:
        raise ValueError(_basics.last_error())
    return list(buf[:min(n, got)])


def _get_process_set_ids_and_ranks():
    if not _basics.is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    n = _lib.hvd_process_set_ids(None, 0)
    ids = (_ctypes.c_int * max(1, n))()
    n = min(n, _lib.hvd_process_set_ids(ids, n))
    return {int(i): _process_set_ranks(int(i)) for i in ids[:n]}


def _add_process_set_impl(ranks):
    """Registers a set (collective over the job); its id, or None when the set exists already."""
    ranks = [int(r) for r in ranks]
    out = _ctypes.c_int(-1)
    code = _lib.hvd_add_process_set(_basics._int_array(ranks), len(ranks), _ctypes.byref(out))
    if code == _exc.ALREADY_EXISTS:
        return None
    if code in (_exc.INVALID_ARGUMENT, _exc.FAILED_PRECONDITION, _exc.NOT_FOUND):
        raise ValueError(_basics.last_error())
    _basics.check(code, "hvd.add_process_set")
    return out.value


def _remove_process_set_impl(process_set_id):
    """Removes a set (collective over the job); its id, or None when there is no such set."""
    if process_set_id == 0:
        return None
    code = _lib.hvd_remove_process_set(int(process_set_id))
    if code == _exc.NOT_FOUND:
        return None
    if code in (_exc.INVALID_ARGUMENT, _exc.FAILED_PRECONDITION):
        raise ValueError(_basics.last_error())
    _basics.check(code, "hvd.remove_process_set")
    return process_set_id
