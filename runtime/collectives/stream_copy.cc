// Non-temporal copies and the streamed out-of-place reduction: see stream_copy.h.
#include "collectives/stream_copy.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "collectives/reduce.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hvd::runtime::collectives {

namespace {

std::atomic<uint64_t> streamed_bytes{0};

// StreamCopy without its fence.
void StreamStores(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Plain stores up to dst's first 16-byte boundary (the streaming store needs it aligned).
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i v2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i v3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), v0);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), v1);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), v2);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), v3);
  }
  for (; i + 16 <= bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  }
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

// Streaming stores are weakly ordered: without the fence, a release store after them (the
// operation's completion, a ring index) could become visible to another thread before the data.
void StoreFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace

uint64_t StreamedBytes() {
  return streamed_bytes.load(std::memory_order_relaxed);
}

void StreamCopy(void* dst, const void* src, size_t bytes) {
  StreamStores(dst, src, bytes);
  StoreFence();
  streamed_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void ReduceToStreamed(void* dst, const void* a, const void* src, void* copy, size_t count,
                      DataType dtype, ReduceOp op, double scale) {
  // Each block reduced (and scaled) in a per-thread buffer that stays in L1, then streamed.
  alignas(64) thread_local char block_buf[8 << 10];
  const size_t es = DataTypeSize(dtype);
  char* const c = static_cast<char*>(copy);
  ForEachL1Block(count, dtype, [&](size_t first, size_t n) {
    const size_t at = first * es;
    // The kernel writes the forwarded copy itself unless the result is scaled after it.
    ReduceTo(block_buf, static_cast<const char*>(a) + at, static_cast<const char*>(src) + at,
             c != nullptr && scale == 1.0 ? c + at : nullptr, n, dtype, op);
    if (scale != 1.0) {
      Scale(block_buf, n, dtype, scale);
      if (c != nullptr) std::memcpy(c + at, block_buf, n * es);
    }
    StreamStores(static_cast<char*>(dst) + at, block_buf, n * es);
  });
  StoreFence();
  streamed_bytes.fetch_add(count * es, std::memory_order_relaxed);
}

}  // namespace hvd::runtime::collectives
