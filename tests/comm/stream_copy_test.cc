// Non-temporal copies and the streamed out-of-place reduction (collectives/stream_copy.h): the
// same bytes as memcpy and as ReduceTo followed by Scale, at every alignment, dtype and op. That
// the ring and the single copy give the same results with them on: collectives_test.cc
// ("shm_ring_stream", "shm_single_stream", AgreeBitForBit).
#include "collectives/stream_copy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "collectives_harness.h"
#include "reduce_reference.h"
#include "testutil/cross_memory.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using test::Config;
using test::kAllTypes;
using test::kKernelOps;
using test::kLengths;
using test::MakeOperands;

// Every length up to a few vectors and blocks, at every offset of dst and src within 16 bytes;
// the bytes around dst are left alone.
TEST(StreamCopy, CopiesLikeMemcpyAtEveryAlignment) {
  std::vector<char> src(600);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  for (size_t bytes : {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 200, 511}) {
    for (size_t dst_off = 0; dst_off < 16; ++dst_off) {
      for (size_t src_off : {0, 1, 8, 15}) {
        alignas(64) char dst[600];
        std::memset(dst, 0x5a, sizeof dst);
        StreamCopy(dst + dst_off, src.data() + src_off, bytes);
        const std::string what = std::to_string(bytes) + " bytes, dst + " +
                                 std::to_string(dst_off) + ", src + " + std::to_string(src_off);
        ASSERT_EQ(std::memcmp(dst + dst_off, src.data() + src_off, bytes), 0) << what;
        for (size_t i = 0; i < dst_off; ++i) ASSERT_EQ(dst[i], 0x5a) << what;
        for (size_t i = dst_off + bytes; i < sizeof dst; ++i) ASSERT_EQ(dst[i], 0x5a) << what;
      }
    }
  }
}

// dst = a op src, scaled, as ReduceTo then Scale would leave dst, and the copy as the ring's
// forwarded bytes (the scaled result): every dtype, op and length (blocks of 8 KiB and a
// remainder), scales 1 and 1/3, `a` and `src` one byte off their alignment, dst aligned or one
// element off, out of place and in place; order-sensitive operands (PutOrderSensitivePairs)
// catch a swap.
TEST(ReduceToStreamed, HasTheBitsOfReduceToThenScale) {
  for (DataType t : kAllTypes) {
    const size_t es = DataTypeSize(t);
    for (ReduceOp op : kKernelOps) {
      for (size_t n : kLengths) {
        const auto [a_values, src_values, a, src] = MakeOperands(t, n, 7000);
        for (double scale : {1.0, 1.0 / 3}) {
          if (t == DataType::kBool && scale != 1.0) continue;  // bools are not averaged
          for (bool in_place : {false, true}) {
            for (bool with_copy : {false, true}) {
              // What the ring does unstreamed: the copy made by the kernel when nothing is
              // scaled (the kernel with a copy may commute a sum: which NaN of two it keeps),
              // else reduced, scaled and then copied.
              std::vector<char> want(n * es, '\x11'), want_copy(n * es + 1, '\x5a');
              if (in_place) want = a_values;
              const char* first = in_place ? want.data() : a.data() + 1;
              const bool kernel_copies = with_copy && scale == 1.0;
              ReduceTo(want.data(), first, src.data() + 1,
                       kernel_copies ? want_copy.data() + 1 : nullptr, n, t, op);
              if (scale != 1.0) Scale(want.data(), n, t, scale);
              if (with_copy && n > 0) std::memcpy(want_copy.data() + 1, want.data(), n * es);

              // dst aligned as the vector's memory, and one element further (the streamed
              // stores' unaligned head).
              for (size_t dst_off : {size_t{0}, es}) {
                std::vector<char> dst_buf(n * es + es, '\x11'), copy(n * es + 1, '\x5a');
                char* dst = dst_buf.data() + dst_off;
                if (in_place && n > 0) std::memcpy(dst, a_values.data(), n * es);
                ReduceToStreamed(dst, in_place ? dst : a.data() + 1, src.data() + 1,
                                 with_copy ? copy.data() + 1 : nullptr, n, t, op, scale);
                const std::string what =
                    std::string(DataTypeName(t)) + " " + std::string(ReduceOpName(op)) +
                    " n=" + std::to_string(n) + " scale " + std::to_string(scale) +
                    (in_place ? " in place" : "") + (with_copy ? " with a copy" : "") + " dst + " +
                    std::to_string(dst_off);
                ASSERT_TRUE(std::equal(want.begin(), want.end(), dst)) << what;
                ASSERT_EQ(dst_buf[dst_off == 0 ? n * es : 0], '\x11') << what;
                ASSERT_TRUE(copy == want_copy) << what;
                ASSERT_TRUE(std::equal(a_values.begin(), a_values.end(), a.begin() + 1)) << what;
              }
            }
          }
        }
      }
    }
  }
}

// Which allreduces stream their output, seen in each rank's StreamedBytes(): out of place from
// the threshold (input and output together), on the ring of 2 and 3 ranks and in the single
// copy; never in place, below the threshold, over TCP (no zero-copy link) or with the setting 0.
// Every result is checked against the in-place allreduce's bits.
TEST(StreamedOutput, OnlyOutOfPlaceFromTheThresholdOnSharedMemory) {
  constexpr size_t kMin = 1 << 20;  // Comm::stream_min_bytes
  struct Case {
    Config config;
    bool streams;  // out of place at 1 MiB (2 MiB with the input)
  };
  std::vector<Case> cases = {
      {{"ring2", 2, 1, true, 0, 4096, 0, 0, kMin}, true},
      {{"ring3", 3, 1, true, 0, 4096, 0, 0, kMin}, true},
      {{"single2", 2, 1, true, 0, 4096, 1, 0, kMin}, true},
      {{"tcp2", 2, 1, false, 0, 4096, 0, 0, kMin}, false},
      {{"off2", 2, 1, true, 0, 4096, 0, 0, 0}, false},
  };
  if (!hvd::testing::CrossMemoryUnavailable().empty()) cases.erase(cases.begin() + 2);
  for (const Case& c : cases) {
    RunResult res = RunRanks(c.config.ranks, [&c](int rank, int, const std::string& dir) {
      std::unique_ptr<transport::Transport> t;
      HVD_RETURN_IF_ERROR(test::Connect(c.config, rank, dir, &t));
      Comm comm = test::MakeComm(c.config, t.get(), test::Millis(30000));
      HVD_RETURN_IF_ERROR(test::EnableSingleCopyAsAsked(c.config, &comm));
      // count x 4 bytes: 1 MiB (streams out of place), 256 KiB (512 KiB with the input: not).
      for (size_t count : {size_t{1} << 18, size_t{1} << 16}) {
        std::vector<float> in(count), want(count), out(count, -1.0f);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i * 7 + rank) % 1000);
        want = in;
        const uint64_t before = StreamedBytes();
        HVD_RETURN_IF_ERROR(
            Allreduce(comm, want.data(), count, DataType::kFloat32, ReduceOp::kAverage));
        const uint64_t in_place = StreamedBytes() - before;
        HVD_RETURN_IF_ERROR(AllreduceParts(comm, in.data(), out.data(),
                                           AllreduceLayout(comm, count), DataType::kFloat32,
                                           ReduceOp::kAverage));
        const uint64_t out_of_place = StreamedBytes() - before - in_place;
        const std::string what = c.config.name + " rank " + std::to_string(rank) + ", " +
                                 std::to_string(count * 4) + " bytes: ";
        if (out != want) return Internal(what + "out of place differs from in place");
        if (in_place != 0) return Internal(what + "in place streamed " + std::to_string(in_place));
        const bool want_streamed = c.streams && 2 * count * 4 >= kMin;
        // With 3 ranks a reduce step's partial sums stream too (forwarded, overwritten later).
        if (want_streamed != (out_of_place > 0) || out_of_place > 2 * count * 4) {
          return Internal(what + "out of place streamed " + std::to_string(out_of_place) +
                          " bytes, want " + (want_streamed ? "some, at most twice all" : "none"));
        }
      }
      return Status::OK();
    });
    SCOPED_TRACE(c.config.name);
    HVD_EXPECT_RANKS_OK(res);
  }
}

}  // namespace
}  // namespace hvd::runtime::collectives
