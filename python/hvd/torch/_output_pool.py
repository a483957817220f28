"""Host memory reused for the outputs of large out-of-place operations (allreduce, and the results
the runtime owns that are copied into new tensors).

A new 64 MiB CPU tensor is a fresh mapping from glibc (anything above 32 MiB always is), and
writing it first costs a page fault per 4 KiB page: about 25 ms on a VM, several times the
allreduce itself. So an output of at least MIN_BYTES is a tensor over a block this module keeps:
the tensor views the block through a small ctypes object (torch.frombuffer keeps it alive as long
as the tensor or any view of it lives), and when the last of them is gone the block goes back to
a free list instead of to the system, with its pages still in place, for the next output of the
same size. The free list holds at most HVD_TORCH_OUTPUT_POOL_BYTES (default 512 MiB; 0: no
pool, every output from torch.empty_like). Blocks in use are the caller's tensors and are not
counted.

The tensors are ordinary CPU tensors with two differences from torch.empty's: their storage
cannot be resized (resize_ to a larger size fails), and their memory goes back to this pool, not
to the system, when they are freed.
"""
import ctypes
import os

import torch

MIN_BYTES = 4 << 20  # below this, glibc's heap already reuses freed memory
POOL_ENV = "HVD_TORCH_OUTPUT_POOL_BYTES"
_DEFAULT_LIMIT = 512 << 20


def _read_limit():
    value = os.environ.get(POOL_ENV, "")
    if value == "":
        return _DEFAULT_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = -1
    if limit < 0:
        raise ValueError("%s=%r: expected a number of bytes >= 0 (0: no pool)" % (POOL_ENV, value))
    return limit


_limit = _read_limit()
_free = {}      # nbytes -> [uint8 tensor]: blocks whose tensors are all gone
_free_bytes = [0]
_holders = {}   # nbytes -> the ctypes array type viewing a block of that size


def _return(nbytes, block):
    """A block's last tensor is gone (called from a holder's __del__, with the GIL)."""
    if _free_bytes[0] + nbytes > _limit:
        return  # the pool is full: the block goes back to the system
    _free.setdefault(nbytes, []).append(block)
    _free_bytes[0] += nbytes


def _holder(nbytes):
    cls = _holders.get(nbytes)
    if cls is None:
        if len(_holders) > 256:  # many sizes come and go: forget the types, not the blocks
            _holders.clear()

        def __del__(self):
            _return(len(self), self.block)

        cls = type("_Block%d" % nbytes, (ctypes.c_ubyte * nbytes,), {"__del__": __del__})
        _holders[nbytes] = cls
    return cls


def empty_like(src):
    """torch.empty_like(src) for a contiguous CPU tensor; from the pool when it is large."""
    nbytes = src.numel() * src.element_size()
    if nbytes < MIN_BYTES or _limit == 0:
        return torch.empty_like(src)
    return empty(src.shape, src.dtype, nbytes)


def empty(shape, dtype, nbytes):
    """A contiguous CPU tensor of `shape` and `dtype` (nbytes in all, at least MIN_BYTES: the
    caller checks), over a block of the pool."""
    blocks = _free.get(nbytes)
    if blocks:
        block = blocks.pop()
        _free_bytes[0] -= nbytes
    else:
        block = torch.empty(nbytes, dtype=torch.uint8)
    holder = _holder(nbytes).from_address(block.data_ptr())
    holder.block = block
    return torch.frombuffer(holder, dtype=dtype).view(shape)


def pooled(nbytes):
    """Whether an output of nbytes comes from the pool."""
    return nbytes >= MIN_BYTES and _limit > 0


def stats():
    """(free blocks, bytes they hold): for tests."""
    return sum(len(b) for b in _free.values()), _free_bytes[0]
