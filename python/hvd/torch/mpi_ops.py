"""Horovod's PyTorch collectives (horovod.torch.mpi_ops) over hvd's C ABI: every name Horovod's
mpi_ops has, so that `from horovod.torch.mpi_ops import ...` keeps working. The implementation is
split by responsibility:

  hvd.torch._handles      tensor checks, hvd_tensor descriptors, names, the handle table, waiting
                          (poll, synchronize), join, barrier
  hvd.torch._allreduce    allreduce and grouped allreduce (sync, async, in place, autograd)
  hvd.torch._collectives  allgather, broadcast, alltoall, reducescatter (and grouped), sparse
                          allreduce, the byte collectives behind the object functions

Tensors: host (CPU) and CUDA tensors of dtype uint8, int8, int16, int32, int64, float16, bfloat16,
float32, float64 or bool. Others (complex, quantized...) raise ValueError naming the dtype.
Non-contiguous tensors are copied to contiguous ones (in-place operations copy the result back).
A CUDA tensor is passed with its device index and torch's current stream on that device (the
runtime's work is ordered after it); every result is on the input's device (docs/gpu.md).

Names: an explicit name is prefixed with the operation ("allreduce.<name>"), as Horovod does, so
that an allreduce and an allgather may share a user name. Unnamed operations are numbered by the
runtime, per process set ("allreduce.noname.<n>"), so that operations on a subset do not shift the
names of later unnamed operations on other sets.

Errors raised by synchronize() (and by the synchronous functions): see hvd.common.exceptions.
"""
from hvd.common import basics as _b
from hvd.common.exceptions import HorovodInternalError  # noqa: F401
from hvd.common.process_sets import ProcessSet, global_process_set, add_process_set, \
    remove_process_set  # noqa: F401 (Horovod's mpi_ops exports them)
from hvd.torch._allreduce import handle_average_backwards_compatibility  # noqa: F401
from hvd.torch._allreduce import HorovodAllreduce, HorovodGroupedAllreduce  # noqa: F401
from hvd.torch._allreduce import allreduce, allreduce_, allreduce_async, \
    allreduce_async_  # noqa: F401
from hvd.torch._allreduce import grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, \
    grouped_allreduce_async_  # noqa: F401
from hvd.torch._collectives import HorovodAllgather, HorovodGroupedAllgather, HorovodBroadcast, \
    HorovodAlltoall, HorovodReducescatter, HorovodGroupedReducescatter  # noqa: F401
from hvd.torch._collectives import allgather, allgather_async, grouped_allgather, \
    grouped_allgather_async  # noqa: F401
from hvd.torch._collectives import broadcast, broadcast_, broadcast_async, \
    broadcast_async_  # noqa: F401
from hvd.torch._collectives import alltoall, alltoall_async  # noqa: F401
from hvd.torch._collectives import reducescatter, reducescatter_async, grouped_reducescatter, \
    grouped_reducescatter_async  # noqa: F401
from hvd.torch._collectives import sparse_allreduce_async  # noqa: F401
from hvd.torch._handles import poll, synchronize, join, barrier  # noqa: F401
from hvd.torch.compression import Compression  # noqa: F401

# ---- basics (Horovod's names) -------------------------------------------------------------------

shutdown = _b.shutdown
is_initialized = _b.is_initialized
start_timeline = _b.start_timeline
stop_timeline = _b.stop_timeline
size = _b.size
local_size = _b.local_size
cross_size = _b.cross_size
rank = _b.rank
local_rank = _b.local_rank
cross_rank = _b.cross_rank
is_homogeneous = _b.is_homogeneous
mpi_threads_supported = _b.mpi_threads_supported
mpi_enabled = _b.mpi_enabled
mpi_built = _b.mpi_built
gloo_enabled = _b.gloo_enabled
gloo_built = _b.gloo_built
nccl_built = _b.nccl_built
ddl_built = _b.ddl_built
ccl_built = _b.ccl_built
cuda_built = _b.cuda_built
rocm_built = _b.rocm_built

Average = _b.Average
Sum = _b.Sum
Adasum = _b.Adasum
Min = _b.Min
Max = _b.Max
Product = _b.Product


def init(comm=None, process_sets=None):
    """Initializes hvd; see hvd.common.basics.init (Horovod's hvd.init(comm, process_sets))."""
    _b.init(comm=comm, process_sets=process_sets)
