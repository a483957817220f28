"""`import horovod.torch as hvd` gives hvd.torch itself (one module, one handle table):
horovod.torch and its submodules are aliases of hvd.torch's in sys.modules."""
import sys

import hvd.torch as _impl
from hvd.torch import compression, functions, mpi_ops, optimizer, sync_batch_norm  # noqa: F401
from hvd.torch import elastic  # noqa: F401
from hvd.torch.elastic import sampler, state  # noqa: F401

for _sub in ("compression", "elastic", "functions", "mpi_ops", "optimizer", "sync_batch_norm"):
    sys.modules[__name__ + "." + _sub] = getattr(_impl, _sub)
for _sub in ("sampler", "state"):
    sys.modules[__name__ + ".elastic." + _sub] = getattr(_impl.elastic, _sub)
sys.modules[__name__] = _impl
