"""Host memory reused for the outputs of large out-of-place operations (allreduce, grouped
allreduce, and the results the runtime owns that are copied into new tensors).

A new 64 MiB CPU tensor is a fresh mapping from glibc (anything above 32 MiB always is), and
writing it first costs a page fault per 4 KiB page: about 25 ms on a VM, several times the
allreduce itself. So an output of at least MIN_BYTES is a tensor over a block this module keeps:
the tensor uses the block's memory through a small ctypes object (torch.frombuffer keeps it alive
as long as the tensor, or any view of it, lives), and when the last of them is gone the block goes
back to a free list instead of to the system, with its pages still in place, for the next output
of the same size. The free list holds at most HVD_TORCH_OUTPUT_POOL_BYTES (default 256 MiB; 0: no
pool, every output from torch.empty_like), the blocks freed longest ago leaving first, so sizes
that never come back (an allgather's output follows the data) do not hold the memory for good.
Blocks in use are the caller's tensors and are not counted. (The smaller outputs of a
synchronous allreduce of a plain host tensor are made in C, over blocks hvd.common._fastcall
keeps in slots of its own, which this variable sizes and turns off too: _fastcall_outputs.cc.)

The tensors are ordinary CPU tensors (not views: in-place changes and autograd behave as on
torch.empty's) with one difference: their storage cannot grow (resize_ to a larger size, or an
out= argument that must grow, fails with "Trying to resize storage that is not resizable").
"""
import ctypes
import os
import threading

import torch

MIN_BYTES = 4 << 20  # below this, glibc's heap already reuses freed memory
POOL_ENV = "HVD_TORCH_OUTPUT_POOL_BYTES"
_DEFAULT_LIMIT = 256 << 20


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
# Free blocks, freed longest ago first: [nbytes, uint8 tensor]. Re-entrant: a holder's __del__
# may run (garbage collection) on a thread that holds the lock already; nothing calls into torch
# while holding it.
_lock = threading.RLock()
_free = []
_free_bytes = 0
_holders = {}  # nbytes -> the ctypes array type over a block of that size


def _return(nbytes, block):
    """A block's last tensor is gone (from a holder's __del__)."""
    global _free_bytes
    if nbytes > _limit:
        return
    with _lock:
        _free.append((nbytes, block))
        _free_bytes += nbytes
        while _free_bytes > _limit:  # the oldest leave first
            gone, _ = _free.pop(0)
            _free_bytes -= gone


def _take(nbytes):
    """A free block of nbytes (the one freed last), or None."""
    global _free_bytes
    with _lock:
        for i in range(len(_free) - 1, -1, -1):
            if _free[i][0] == nbytes:
                _free_bytes -= nbytes
                return _free.pop(i)[1]
    return None


def _holder(nbytes):
    cls = _holders.get(nbytes)
    if cls is None:
        if len(_holders) > 256:  # many sizes come and go: forget the types, not the blocks
            _holders.clear()

        def __del__(self):
            try:
                _return(len(self), self.block)
            except Exception:  # at interpreter exit the module's globals may be gone
                pass

        cls = type("_Block%d" % nbytes, (ctypes.c_ubyte * nbytes,), {"__del__": __del__})
        _holders[nbytes] = cls
    return cls


def limit():
    """HVD_TORCH_OUTPUT_POOL_BYTES: the most bytes the pool keeps (0: no pool)."""
    return _limit


def pooled(nbytes):
    """Whether an output of nbytes comes from the pool."""
    return nbytes >= MIN_BYTES and _limit > 0


def empty_like(src, memory_format=torch.preserve_format):
    """torch.empty_like(src, memory_format=...) for a contiguous CPU tensor; a large one from the
    pool (contiguous)."""
    nbytes = src.numel() * src.element_size()
    if not pooled(nbytes):
        return torch.empty_like(src, memory_format=memory_format)
    return empty(src.shape, src.dtype, nbytes)


def empty(shape, dtype, nbytes):
    """A contiguous CPU tensor of `shape` and `dtype` (nbytes in all; pooled(nbytes): the caller
    checks), over a block of the pool."""
    block = _take(nbytes)
    if block is None:
        block = torch.empty(nbytes, dtype=torch.uint8)
    holder = _holder(nbytes).from_address(block.data_ptr())
    holder.block = block
    # detach(): a tensor of its own over the storage, not a view of frombuffer's (autograd
    # forbids in-place changes of some views); the storage keeps the holder alive.
    return torch.frombuffer(holder, dtype=dtype).view(shape).detach()


def stats():
    """(free blocks, bytes they hold): for tests."""
    with _lock:
        return len(_free), _free_bytes
