"""Small helpers shared by the bindings (Horovod's horovod.common.util, the parts scripts use)."""
import warnings


def is_iterable(x):
    try:
        iter(x)
    except TypeError:
        return False
    return True


def split_list(items, num_parts):
    """Splits `items` into `num_parts` consecutive parts whose lengths differ by at most one
    (the first parts take the extra items)."""
    items = list(items)
    num_parts = max(1, min(int(num_parts), len(items))) if items else 1
    base, extra = divmod(len(items), num_parts)
    out, at = [], 0
    for i in range(num_parts):
        n = base + (1 if i < extra else 0)
        out.append(items[at:at + n])
        at += n
    return out


def num_rank_is_power_2(num_rank):
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0


def get_average_backwards_compatibility_fun(reduce_ops):
    """Returns f(op, average) -> op resolving Horovod's deprecated `average` argument:
    `op` wins; both given is a ValueError; neither means Average."""

    def impl(op, average):
        if op is not None:
            if average is not None:
                raise ValueError("The op parameter supersedes average. "
                                 "Please provide only one of them.")
            return op
        if average is not None:
            warnings.warn('Parameter `average` has been replaced with `op` and will be removed',
                          DeprecationWarning, stacklevel=3)
            return reduce_ops.Average if average else reduce_ops.Sum
        return reduce_ops.Average

    return impl


def gpu_available(ext_base_name, verbose=False):
    """Horovod's horovod.common.util.gpu_available: whether the framework binding `ext_base_name`
    ('torch') takes GPU tensors, i.e. whether this build has the CUDA plugin (no GPU needed). hvd
    binds PyTorch only: any other framework is False."""
    if ext_base_name not in ("torch", "horovod.torch", "hvd.torch"):
        return False
    from hvd.common.build_info import cuda_built  # needs libhvd.so: imported when asked
    return cuda_built()


def check_extension(ext_name, ext_env_var, pkg_path, *args):
    """Horovod's horovod.common.util.check_extension: ImportError unless the framework extension
    `ext_name` was built. hvd's PyTorch binding is libhvd.so through ctypes, loaded when
    hvd.common.basics is imported (which raises if it cannot be); other frameworks have none."""
    if ext_name not in ("torch", "horovod.torch", "hvd.torch"):
        raise ImportError("Extension %s has not been built: hvd binds PyTorch only (hvd.torch, or "
                          "horovod.torch through its compatibility package); %s has no effect"
                          % (ext_name, ext_env_var))
    from hvd.common import basics  # noqa: F401  (raises when libhvd.so cannot be loaded)
