// Copies whose destination bypasses the cache (non-temporal stores), for an out-of-place
// allreduce's output when it is larger than the cache: a normal store first reads the line it
// writes ("read for ownership"), so each result byte costs memory a read and a write; a streamed
// one only the write. In place there is nothing to gain: the ring read each line for its first
// send moments before it writes it. Measured on the development VM (AMD EPYC, 2 vCPUs sharing a
// 32 MiB L3): one thread placing 32 MiB in 256 KiB pieces from a buffer in cache, memcpy 17
// GB/s, streamed 28; 8 MiB, which the cache holds, the other way round (43 against 28). Two
// ranks out of place: slower at 4 MiB, level at 8, faster from 16 (input and output 32 MiB):
// hence Comm::stream_min_bytes (HVD_STREAM_STORES_MIN_BYTES; docs/performance-api.md, "Results
// written around the cache").
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/collectives.h"
#include "hvd/types.h"

namespace hvd::runtime::collectives {

// Whether StreamCopy has non-temporal stores here (x86-64). Elsewhere it is a memcpy and a
// streamed reduction one copy more than ReduceTo: the algorithms then never stream.
#if defined(__x86_64__)
inline constexpr bool kHaveStreamStores = true;
#else
inline constexpr bool kHaveStreamStores = false;
#endif

// Whether `comm` streams an out-of-place output of `bytes` (its input as large): the rule the
// ring and the single copy share (Comm::stream_min_bytes counts input and output together).
inline bool StreamsOutput(const Comm& comm, size_t bytes) {
  return kHaveStreamStores && comm.stream_min_bytes > 0 && bytes > 0 &&
         2 * bytes >= comm.stream_min_bytes;
}

// memcpy(dst, src, bytes) with non-temporal stores where the machine has them (x86-64: SSE2,
// 16 bytes at a time; the unaligned head and tail of dst with plain stores); a plain memcpy
// elsewhere. Ends with a store fence, so a release that follows (an operation marked done, a
// shared-memory index) orders these stores for other threads and processes as it orders plain
// ones. REQUIRES: dst and src do not overlap.
void StreamCopy(void* dst, const void* src, size_t bytes);

// Bytes written by StreamCopy and ReduceToStreamed in this process since it started (a relaxed
// counter: tests check that an algorithm streamed, or did not).
uint64_t StreamedBytes();

// Out of place: dst = a op src, the result also written to `copy` when not null and then
// multiplied by `scale` when it is not 1 (Scale's rounding, before the copy), with dst written
// by StreamCopy. The bits of ReduceTo followed by Scale: each block is reduced and scaled in a
// per-thread buffer in the L1 cache by the same kernels, then streamed. a == dst is allowed (in
// place). REQUIRES: as ReduceTo.
void ReduceToStreamed(void* dst, const void* a, const void* src, void* copy, size_t count,
                      DataType dtype, ReduceOp op, double scale);

}  // namespace hvd::runtime::collectives
