"""What this build of hvd takes besides host tensors: Horovod's cuda_built() and nccl_built().

CUDA tensors are handled by the CUDA plugin, libhvd_cuda.so, built beside libhvd.so where the CUDA
toolkit is and loaded by the runtime at the first device tensor (docs/gpu.md); the plugin loads
NCCL itself, at run time. So "built" means: the plugin is where the runtime looks for it, and (for
NCCL) the NCCL library the plugin would load is there. When libhvd.so answers itself (the C ABI's
hvd_cuda_built / hvd_nccl_built, where it exports them), its answer wins.
"""
import ctypes
import os

CUDA_PLUGIN_ENV = "HVD_CUDA_PLUGIN"
CUDA_PLUGIN_NAME = "libhvd_cuda.so"
NCCL_LIBRARY_ENV = "HVD_NCCL_LIBRARY"


def _abi_flag(name):
    """The runtime's own answer (an int) when this libhvd.so exports `name`, else None."""
    from hvd.common import basics  # imported by basics: looked up at call time
    fn = getattr(basics.lib, name, None)
    if fn is None:
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return int(fn())


def cuda_plugin_path():
    """The CUDA plugin the runtime loads ($HVD_CUDA_PLUGIN, else libhvd_cuda.so beside
    libhvd.so), or None when there is none: this build then takes host tensors only."""
    from hvd.common import basics
    env = os.environ.get(CUDA_PLUGIN_ENV)
    path = env if env else os.path.join(os.path.dirname(os.path.abspath(basics.library_path)),
                                        CUDA_PLUGIN_NAME)
    return path if os.path.isfile(path) else None


def cuda_built():
    """True when this build takes CUDA tensors (Horovod's cuda_built(): compiled with CUDA),
    whether or not this host has a GPU: the runtime says so when it can, else the CUDA plugin
    is looked for where the runtime loads it from."""
    flag = _abi_flag("hvd_cuda_built")
    return bool(flag) if flag is not None else cuda_plugin_path() is not None


_nccl_version = None


def _loadable_nccl_version():
    """ncclGetVersion of the NCCL the CUDA plugin loads (its search order: $HVD_NCCL_LIBRARY,
    libnccl.so.2 by the loader's path, /usr/local/cuda/lib64/libnccl.so.2); 0 when none loads.
    The same path the plugin opens later gives the same library (dlopen loads a file once)."""
    env = os.environ.get(NCCL_LIBRARY_ENV)
    for path in ([env] if env else ["libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"]):
        try:
            nccl = ctypes.CDLL(path)
            version = ctypes.c_int(0)
            if nccl.ncclGetVersion(ctypes.byref(version)) == 0:
                return version.value
        except (OSError, AttributeError):
            continue
    return 0


def nccl_built():
    """NCCL's version code (22703 for 2.27.3) when CUDA tensors can go through NCCL, else 0
    (Horovod's nccl_built(): NCCL_VERSION_CODE, or 0 without NCCL). hvd loads NCCL at run time,
    so the version is the runtime's answer when it gives one, else that of the NCCL the plugin
    would load. Without NCCL, CUDA tensors still work, staged through host memory."""
    global _nccl_version
    flag = _abi_flag("hvd_nccl_built")
    if flag is not None:
        return flag
    if _nccl_version is None:
        _nccl_version = _loadable_nccl_version() if cuda_built() else 0
    return _nccl_version
