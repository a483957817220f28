"""Horovod's PyTorch API (horovod.torch, version 0.28) over hvd's runtime:

    import hvd.torch as hvd          # or, with build/python_compat on PYTHONPATH,
                                     #    import horovod.torch as hvd
    hvd.init()
    model = ...
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

Run with hvdrun: `hvdrun -np 4 python3 train.py`.
"""
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from hvd.common.util import check_extension, split_list
from hvd.torch.compression import Compression
from hvd.torch.functions import allgather_object, broadcast_object, broadcast_optimizer_state, \
    broadcast_parameters
from hvd.torch.mpi_ops import allreduce, allreduce_async, allreduce_, allreduce_async_
from hvd.torch.mpi_ops import grouped_allreduce, grouped_allreduce_async, grouped_allreduce_, \
    grouped_allreduce_async_
from hvd.torch.mpi_ops import sparse_allreduce_async
from hvd.torch.mpi_ops import allgather, allgather_async
from hvd.torch.mpi_ops import grouped_allgather, grouped_allgather_async
from hvd.torch.mpi_ops import broadcast, broadcast_async, broadcast_, broadcast_async_
from hvd.torch.mpi_ops import alltoall, alltoall_async
from hvd.torch.mpi_ops import reducescatter, reducescatter_async
from hvd.torch.mpi_ops import grouped_reducescatter, grouped_reducescatter_async
from hvd.torch.mpi_ops import join
from hvd.torch.mpi_ops import barrier
from hvd.torch.mpi_ops import poll, synchronize
from hvd.torch.mpi_ops import init, shutdown
from hvd.torch.mpi_ops import is_initialized, start_timeline, stop_timeline
from hvd.torch.mpi_ops import size, local_size, cross_size, rank, local_rank, cross_rank
from hvd.torch.mpi_ops import is_homogeneous
from hvd.torch.mpi_ops import mpi_threads_supported, mpi_enabled, mpi_built
from hvd.torch.mpi_ops import gloo_enabled, gloo_built
from hvd.torch.mpi_ops import nccl_built, ddl_built, ccl_built, cuda_built, rocm_built
from hvd.torch.mpi_ops import ProcessSet, global_process_set, add_process_set, remove_process_set
from hvd.torch.mpi_ops import Average, Sum, Adasum, Min, Max, Product
from hvd.torch.optimizer import DistributedOptimizer
from hvd.torch.sync_batch_norm import SyncBatchNorm
from hvd.torch import elastic  # hvd.elastic.run, TorchState, ElasticSampler (after the above)
