"""`horovod.common` and its submodules as aliases of hvd.common's (the same exception classes and
process set objects)."""
import sys

import hvd.common as _impl
from hvd.common import basics, elastic, exceptions, process_sets, util  # noqa: F401

for _sub in ("basics", "elastic", "exceptions", "process_sets", "util"):
    sys.modules[__name__ + "." + _sub] = getattr(_impl, _sub)
sys.modules[__name__] = _impl
