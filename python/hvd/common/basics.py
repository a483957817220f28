"""Loads libhvd.so through ctypes, declares the C ABI (runtime/include/hvd/c_api.h) and implements
the framework-independent part of Horovod's API: init, shutdown, topology, build flags, timeline,
reduction op values, process set bookkeeping.

Where the library is looked for (the first that is set or exists):
  1. $HVD_LIBRARY (a path to libhvd.so; when set, nothing else is tried);
  2. libhvd.so inside the hvd package directory (where the build puts it: build/python/hvd/);
  3. libhvd.so next to the package directory.

Why ctypes and not a compiled extension: see python/README.md (no ABI coupling with torch; the GIL
is released around every foreign call; the runtime never calls back into Python).
"""
import atexit
import ctypes
import os
import threading
import warnings

from hvd.common import build_info as _build_info
from hvd.common import exceptions as _exc
from hvd.common import stack_dump as _stack_dump
from hvd.common.util import is_iterable

ABI_VERSION = 2
LIBRARY_ENV = "HVD_LIBRARY"

# Horovod's reduction op values (horovod/common/basics.py: horovod_reduce_op_*()); scripts may
# compare or store them, so they are Horovod's numbers, mapped to hvd's enum at the C boundary.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}
# hvd_reduce_op_t (c_api.h), and Horovod's values to them
HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT, HVD_ADASUM = 0, 1, 2, 3, 4, 5
HVD_OPS = {Average: HVD_AVERAGE, Sum: HVD_SUM, Adasum: HVD_ADASUM, Min: HVD_MIN, Max: HVD_MAX,
           Product: HVD_PRODUCT}


def hvd_op(op):
    """Horovod's op value -> hvd_reduce_op_t; ValueError naming the value when unknown."""
    try:
        return HVD_OPS[op]
    except (KeyError, TypeError):
        raise ValueError("unknown reduction op %r; use hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, "
                         "hvd.Max or hvd.Product" % (op,)) from None


def op_name(op):
    return _OP_NAMES.get(op, repr(op))


class HvdTensor(ctypes.Structure):
    """hvd_tensor (c_api.h): a dense row-major tensor in the caller's memory."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("stream", ctypes.c_void_p),
    ]


_c_int = ctypes.c_int
_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_i64 = ctypes.c_int64
_c_i64_p = ctypes.POINTER(ctypes.c_int64)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_c_double = ctypes.c_double
_c_char_p = ctypes.c_char_p
_handle = ctypes.c_void_p  # hvd_handle*
_tensor_p = ctypes.POINTER(HvdTensor)

# name: (restype, argtypes). Every function the bindings use; a library that lacks one is refused
# at import with the name of what is missing.
_PROTOTYPES = {
    "hvd_abi_version": (_c_int, []),
    "hvd_init": (_c_int, []),
    "hvd_init_with_process_sets": (_c_int, [_c_int_p, _c_int_p, _c_int, _c_int]),
    "hvd_shutdown": (_c_int, []),
    "hvd_is_initialized": (_c_int, []),
    "hvd_rank": (_c_int, []),
    "hvd_size": (_c_int, []),
    "hvd_local_rank": (_c_int, []),
    "hvd_local_size": (_c_int, []),
    "hvd_cross_rank": (_c_int, []),
    "hvd_cross_size": (_c_int, []),
    "hvd_last_error": (_c_char_p, []),
    "hvd_enqueue_allreduce": (_handle, [_c_char_p, _tensor_p, _tensor_p, _c_int, _c_double,
                                        _c_double, _c_int]),
    "hvd_run_allreduce": (_handle, [_c_char_p, _tensor_p, _tensor_p, _c_int, _c_double,
                                    _c_double, _c_int]),
    "hvd_run_allreduce_for": (_c_int, [_c_char_p, _tensor_p, _tensor_p, _c_int, _c_double,
                                       _c_double, _c_int, _c_i64, ctypes.POINTER(_handle)]),
    "hvd_enqueue_grouped_allreduce": (_handle, [_c_char_p, _c_int, _tensor_p, _tensor_p, _c_int,
                                                _c_double, _c_double, _c_int]),
    "hvd_enqueue_allgather": (_handle, [_c_char_p, _tensor_p, _c_int]),
    "hvd_enqueue_grouped_allgather": (_handle, [_c_char_p, _c_int, _tensor_p, _c_int]),
    "hvd_enqueue_broadcast": (_handle, [_c_char_p, _tensor_p, _c_int, _c_int]),
    "hvd_enqueue_alltoall": (_handle, [_c_char_p, _tensor_p, _c_i64_p, _c_int, _c_int]),
    "hvd_enqueue_reducescatter": (_handle, [_c_char_p, _tensor_p, _c_int, _c_double, _c_double,
                                            _c_int]),
    "hvd_enqueue_grouped_reducescatter": (_handle, [_c_char_p, _c_int, _tensor_p, _c_int,
                                                    _c_double, _c_double, _c_int]),
    "hvd_enqueue_allgather_bytes": (_handle, [_c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                              _c_int]),
    "hvd_enqueue_broadcast_bytes": (_handle, [_c_char_p, ctypes.c_void_p, ctypes.c_size_t, _c_int,
                                              _c_int]),
    "hvd_enqueue_barrier": (_handle, [_c_int]),
    "hvd_enqueue_join": (_handle, [_c_int]),
    "hvd_handle_last_joined_rank": (_c_int, [_handle]),
    "hvd_is_homogeneous": (_c_int, []),
    "hvd_add_process_set": (_c_int, [_c_int_p, _c_int, _c_int_p]),
    "hvd_remove_process_set": (_c_int, [_c_int]),
    "hvd_process_set_rank": (_c_int, [_c_int]),
    "hvd_process_set_size": (_c_int, [_c_int]),
    "hvd_process_set_included": (_c_int, [_c_int]),
    "hvd_process_set_ranks": (_c_int, [_c_int, _c_int_p, _c_int]),
    "hvd_process_set_ids": (_c_int, [_c_int_p, _c_int]),
    "hvd_start_timeline": (_c_int, [_c_char_p, _c_int]),
    "hvd_stop_timeline": (_c_int, []),
    "hvd_wait_for": (_c_int, [_handle, _c_i64]),
    "hvd_wait": (_c_int, [_handle]),
    "hvd_poll": (_c_int, [_handle]),
    "hvd_release": (None, [_handle]),
    "hvd_handle_output_at": (ctypes.c_void_p, [_handle, _c_int, _c_size_p]),
    "hvd_handle_output_shape_at": (_c_int, [_handle, _c_int, _c_i64_p, _c_int]),
    "hvd_handle_output_splits": (_c_int, [_handle, _c_int, _c_i64_p, _c_int]),
    "hvd_handle_output_device_at": (_c_int, [_handle, _c_int]),
    "hvd_handle_share": (_handle, [_handle]),
}
# Declared when the library has them; a library without them loads, and what needs them says so
# (elastic_enabled(): "rebuild").
_OPTIONAL_PROTOTYPES = {
    "hvd_elastic_enabled": (_c_int, []),
    "hvd_elastic_generation": (_c_int, [_c_i64_p, _c_i64_p, _c_int_p]),
    "hvd_elastic_committed": (_c_int, []),
    "hvd_native_stack_dump_signal": (_c_int, []),
}


def _library_candidates():
    pkg_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hvd
    return [os.path.join(pkg_dir, "libhvd.so"),
            os.path.join(os.path.dirname(pkg_dir), "libhvd.so")]


def _load_library():
    env = os.environ.get(LIBRARY_ENV)
    paths = [env] if env else _library_candidates()
    problems = []
    for path in paths:
        if not os.path.exists(path):
            problems.append("%s (no such file)" % path)
            continue
        try:
            # ctypes.CDLL (not PyDLL): every call releases the GIL while it runs.
            lib = ctypes.CDLL(path)
        except OSError as e:
            problems.append("%s (%s)" % (path, e))
            continue
        missing = [name for name in _PROTOTYPES if not hasattr(lib, name)]
        if missing:
            raise ImportError(
                "hvd: %s is not an hvd runtime of ABI version %d or later (it lacks %s); rebuild "
                "it (cmake --build build --target hvd_python) or point %s at a current libhvd.so"
                % (path, ABI_VERSION, ", ".join(missing[:4]), LIBRARY_ENV))
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
            if not hasattr(lib, name):
                continue
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        version = lib.hvd_abi_version()
        if version < ABI_VERSION:
            raise ImportError("hvd: %s implements C ABI version %d; these bindings need %d or later"
                              % (path, version, ABI_VERSION))
        return lib, path
    where = ("$%s=%s" % (LIBRARY_ENV, env)) if env else ("beside the package: " + ", ".join(paths))
    raise ImportError(
        "hvd: cannot load the runtime library libhvd.so; looked for %s. Tried: %s. Build it with "
        "`cmake --build build --target hvd_python` and put build/python on PYTHONPATH, or set %s "
        "to the path of libhvd.so." % (where, "; ".join(problems), LIBRARY_ENV))


lib, library_path = _load_library()


def _bind_fastcall():
    """hvd.common._fastcall bound to `lib`'s allreduce functions, or None where it was not built
    (no Python headers at build time) or cannot be loaded: ctypes then makes those calls too."""
    try:
        from hvd.common import _fastcall
    except ImportError:
        return None
    # The addresses of the library's own functions: one runtime in the process.
    try:
        _fastcall.bind(*[ctypes.cast(getattr(lib, "hvd_" + name), ctypes.c_void_p).value
                         for name in ("run_allreduce_for", "enqueue_allreduce", "wait_for",
                                      "poll", "wait", "release")])
    except TypeError:  # a _fastcall.abi3.so older than this file (another bind()): ctypes
        return None
    return _fastcall


# The allreduce calls every gradient makes, ~0.7 us cheaper each than through ctypes.
fastcall = _bind_fastcall()
_wait_for = lib.hvd_wait_for
_poll = lib.hvd_poll
_DEADLINE_EXCEEDED = _exc.DEADLINE_EXCEEDED


def last_error():
    msg = lib.hvd_last_error()
    text = msg.decode("utf-8", "replace") if msg else ""
    # The runtime speaks C++; a Python user calls hvd.init(), not hvd::Init().
    for cpp, py in (("hvd::Init()", "hvd.init()"), ("hvd::Shutdown()", "hvd.shutdown()"),
                    ("hvd::Shutdown", "hvd.shutdown()")):
        text = text.replace(cpp, py)
    return text


def check(code, context=None):
    """Raises the exception for a non-zero status `code` (message from hvd_last_error())."""
    if code != 0:
        raise _exc.error_from_status(code, last_error(), context)


def wait(handle_ptr):
    """Waits for an operation and returns its status code (the message, when not 0, is
    last_error() until the next hvd call on this thread); the handle stays the caller's to
    release. The GIL is released while it waits, in 100 ms slices so that Ctrl-C is seen: one
    hvd_wait_for call when the operation completes within the first slice (the usual case)."""
    code = _wait_for(handle_ptr, 100)
    if code == _DEADLINE_EXCEEDED:  # still pending, or failed with that status
        while not _poll(handle_ptr):
            _wait_for(handle_ptr, 100)
        code = lib.hvd_wait(handle_ptr)  # complete: returns at once with its own status
    return code


# ---- lifecycle ----------------------------------------------------------------------------------

_NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."
_FAILED_PRECONDITION = 6  # hvd::StatusCode::kFailedPrecondition, as the C ABI returns it
# init() succeeded and shutdown() has not been called since: a flag the asynchronous calls read
# instead of asking the runtime (True does not mean the runtime still runs: a peer's failure may
# have stopped it, which their synchronize() says).
initialized_here = False
_lock = threading.RLock()
_atexit_registered = False
_init_hooks = []      # called when init() starts a new session


def add_init_hook(fn):
    _init_hooks.append(fn)


def _int_array(values):
    values = list(values)
    return (ctypes.c_int * max(1, len(values)))(*values)


def init(comm=None, process_sets=None):
    """Initializes hvd (Horovod's hvd.init()): meets the other ranks named by the environment
    (HVD_RANK/HVD_SIZE/HVD_RENDEZVOUS or Horovod's names, set by hvdrun) and starts the background
    thread. Calling it again does nothing.

    comm: None (every rank of the job). hvd has no MPI, so an MPI communicator is refused; a list
    of ranks is accepted only when it names every rank of the job.
    process_sets: None, a list of hvd.ProcessSet to register now (ids 1, 2, ... after those of
    HVD_PROCESS_SETS), or "dynamic" to allow hvd.add_process_set()/remove_process_set() later.
    """
    from hvd.common import process_sets as _ps

    global _atexit_registered
    comm_ranks = None
    if comm is not None:
        if isinstance(comm, (str, bytes)) or not is_iterable(comm):
            raise ValueError(
                "hvd.init(comm=%r): hvd has no MPI support, so an MPI communicator cannot be "
                "used; start the ranks with hvdrun (or HVD_RANK/HVD_SIZE/HVD_RENDEZVOUS) and call "
                "hvd.init() without comm" % (comm,))
        comm_ranks = sorted(int(r) for r in comm) or None

    dynamic = False
    if process_sets is None:
        sets = []
    elif isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("process_sets must be a list of hvd.ProcessSet or \"dynamic\", not %r"
                             % (process_sets,))
        sets, dynamic = [], True
        # As Horovod: the process keeps dynamic sets, so the shutdown(); init() of an elastic
        # reset (or a user's) keeps them too.
        os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    else:
        sets = list(process_sets)
        for i, ps in enumerate(sets):
            if not isinstance(ps, _ps.ProcessSet):
                raise ValueError("process_sets entry %d is %r, not an hvd.ProcessSet" % (i, ps))
            if ps.ranks is None:
                raise ValueError("process_sets entry %d (%s) has no ranks (hvd has no MPI "
                                 "communicators)" % (i, ps))
    with _lock:
        was_initialized = bool(lib.hvd_is_initialized())
        flat = [r for ps in sets for r in ps.ranks]
        sizes = [len(ps.ranks) for ps in sets]
        check(lib.hvd_init_with_process_sets(_int_array(flat), _int_array(sizes), len(sets),
                                             1 if dynamic else 0), "hvd.init")
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit, os.getpid())
            _atexit_registered = True
        _stack_dump.register(getattr(lib, "hvd_native_stack_dump_signal", None))
        job_size = size()
        if comm_ranks is not None and comm_ranks != list(range(job_size)):
            if not was_initialized:  # a failed init leaves nothing initialized
                lib.hvd_shutdown()
            raise ValueError("hvd.init(comm=%s): hvd runs every rank of the job (%d ranks); a "
                             "communicator over a subset needs MPI. Use hvd.ProcessSet for "
                             "subsets." % (comm_ranks, job_size))
        if not was_initialized:
            # A new session: what the bindings kept of an earlier one goes.
            for hook in list(_init_hooks):
                hook()
        _ps._init_process_sets(sets)
        global initialized_here
        initialized_here = True


def shutdown():
    """Stops hvd (Horovod's hvd.shutdown()). Operations still pending on any rank fail with
    HorovodInternalError. Safe to call when not initialized and more than once; it never raises
    (as Horovod's): a failure that stopped hvd earlier was raised by the operations it failed."""
    global initialized_here
    with _lock:
        initialized_here = False
        lib.hvd_shutdown()


def _shutdown_at_exit(pid):
    # Only in the process that initialized: a forked child (a DataLoader worker) that exits
    # through Python must not stop its parent's connections.
    if os.getpid() == pid:
        try:
            shutdown()
        except KeyboardInterrupt:
            # A second Ctrl-C while hvd shut down at exit: the runtime's shutdown has returned
            # (the interrupt is raised after the C call); a traceback would only be noise.
            pass


def is_initialized():
    return bool(lib.hvd_is_initialized())


def _topology(fn):
    value = fn()
    if value == -1:
        raise ValueError(_NOT_INITIALIZED)
    return value


def size():
    """The number of ranks in the job."""
    return _topology(lib.hvd_size)


def rank():
    """This process's rank, 0 .. size()-1."""
    return _topology(lib.hvd_rank)


def local_size():
    """The number of ranks on this host."""
    return _topology(lib.hvd_local_size)


def local_rank():
    """This process's rank among the ranks on its host."""
    return _topology(lib.hvd_local_rank)


def cross_size():
    """The number of hosts that run a rank with this process's local rank."""
    return _topology(lib.hvd_cross_size)


def cross_rank():
    """The index of this host among the hosts that run a rank with this process's local rank."""
    return _topology(lib.hvd_cross_rank)


def is_homogeneous():
    """True when every host runs the same number of ranks (False before init, as Horovod)."""
    return bool(lib.hvd_is_homogeneous())


# ---- what this build is -------------------------------------------------------------------------
# hvd moves host data over its own TCP and shared-memory transports: no MPI, Gloo, DDL, oneCCL or
# ROCm. CUDA tensors are handled by the CUDA plugin, libhvd_cuda.so, built beside libhvd.so where
# the CUDA toolkit is (loaded by the runtime at the first device tensor; docs/gpu.md), which
# loads NCCL itself at run time.


def _not_built():
    """False: hvd has no such backend (see above)."""
    return False


mpi_built = mpi_enabled = gloo_built = gloo_enabled = ddl_built = ccl_built = rocm_built = \
    _not_built


# CUDA and NCCL: hvd.common.build_info (the CUDA plugin and NCCL are looked for at run time).
cuda_built = _build_info.cuda_built
nccl_built = _build_info.nccl_built


def mpi_threads_supported():
    raise ValueError("Horovod MPI is not enabled: hvd does not use MPI (ranks meet through "
                     "hvdrun's rendezvous), so there is no MPI threading to query.")


# ---- timeline -----------------------------------------------------------------------------------

def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome trace of every tensor to `file_path` (written by rank 0; accepted on
    every rank). ValueError when not initialized, already recording or the file cannot be made."""
    if not is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    code = lib.hvd_start_timeline(os.fsencode(file_path), 1 if mark_cycles else 0)
    if code != 0:
        raise ValueError(last_error())


def stop_timeline():
    """Stops the timeline; the file is then complete JSON. Nothing to do when none is recording
    (as Horovod's, which returns then)."""
    if not is_initialized():
        raise ValueError(_NOT_INITIALIZED)
    code = lib.hvd_stop_timeline()
    if code != 0 and code != _FAILED_PRECONDITION:  # that one: no timeline is being recorded
        raise ValueError(last_error())


# ---- elastic mode (used by hvd.common.elastic) ---------------------------------------------------

def _elastic_fn(name):
    if not hasattr(lib, name):
        raise RuntimeError(
            "hvd: this libhvd.so (%s) has no elastic support (it lacks %s); rebuild it "
            "(cmake --build build --target hvd_python) or point %s at a current libhvd.so"
            % (library_path, name, LIBRARY_ENV))
    return getattr(lib, name)


def elastic_enabled():
    """True when this process is a worker of an elastic job (HVD_ELASTIC=1, set by
    hvdrun --min-np/--max-np). RuntimeError ("rebuild") when libhvd.so predates elastic mode."""
    return bool(_elastic_fn("hvd_elastic_enabled")())


def elastic_generation():
    """(joined, latest, only_removed): the membership generation this session joined, the newest
    one the launcher published (latest >= joined), and whether the newest only lost workers
    compared with this session's. RuntimeError when not initialized or not an elastic job."""
    fn = _elastic_fn("hvd_elastic_generation")
    joined, latest, only_removed = ctypes.c_int64(0), ctypes.c_int64(0), ctypes.c_int(0)
    check(fn(ctypes.byref(joined), ctypes.byref(latest), ctypes.byref(only_removed)),
          "hvd elastic generation")
    return joined.value, latest.value, bool(only_removed.value)


def elastic_committed():
    """Tells the launcher that this worker saved a state synced with the others (State.commit()
    calls it): a discovery script's shrinking waits for that before stopping the workers whose
    state the others would otherwise sync to. RuntimeError when not initialized or not elastic.
    A libhvd.so older than the call (HVD_LIBRARY pointing at one) is warned about once and the
    note skipped: a worker started after the job began then never counts as holding the state,
    and a shrink that needs one waits, as for a program that never commits."""
    global _warned_no_commit_note
    if not hasattr(lib, "hvd_elastic_committed"):
        if not _warned_no_commit_note:
            _warned_no_commit_note = True
            warnings.warn("hvd: %s lacks hvd_elastic_committed; rebuild it (cmake --build build "
                          "--target hvd_python) so that a --host-discovery-script can shrink "
                          "this job" % library_path)
        return
    check(lib.hvd_elastic_committed(), "hvd elastic committed")


_warned_no_commit_note = False
