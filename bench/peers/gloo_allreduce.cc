// gloo_allreduce: Gloo's AllreduceRingChunked over its TCP transport on 127.0.0.1, timed and
// checked by the same loop as hvd's allreduce_bench (../allreduce_loop.h), for
// bench/peers/compare.py. Forks its ranks (bench_util's launcher); they meet through Gloo's
// FileStore in the launcher's temp directory.
//
//   gloo_allreduce -np 2 [--sizes 4K,1M] [loop flags]
//
// Gloo algorithms bind to one buffer when built (they pair up the ranks' buffers once), so each
// (buffer, count, type, op) gets its algorithm on first use and reuses it, as a Gloo user would.
// Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed.
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "allreduce_loop.h"
#include "bench_util.h"

namespace hvd::bench {
namespace {

struct Options : LoopOptions {
  int np = 2;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "gloo_allreduce: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: gloo_allreduce -np N [loop flags]\n"
               "  -np      ranks to fork (1..64)\n%s"
               "  (types: float32 float64 int32 int64; ops: sum min max product)\n",
               kLoopFlagsUsage);
  std::exit(error.empty() ? 0 : kExitUsage);
}

template <typename T>
const gloo::ReductionFunction<T>* GlooFn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::kMin:
      return gloo::ReductionFunction<T>::min;
    case ReduceOp::kMax:
      return gloo::ReductionFunction<T>::max;
    case ReduceOp::kProduct:
      return gloo::ReductionFunction<T>::product;
    default:
      return nullptr;  // Gloo has no average
  }
}

template <typename T>
std::unique_ptr<gloo::Algorithm> MakeRing(const std::shared_ptr<gloo::Context>& ctx, void* buf,
                                          size_t count, ReduceOp op) {
  const gloo::ReductionFunction<T>* fn = GlooFn<T>(op);
  if (fn == nullptr) return nullptr;
  std::vector<T*> ptrs = {static_cast<T*>(buf)};
  return std::make_unique<gloo::AllreduceRingChunked<T>>(ctx, ptrs, static_cast<int>(count), fn);
}

std::unique_ptr<gloo::Algorithm> MakeAlgorithm(const std::shared_ptr<gloo::Context>& ctx, void* buf,
                                               size_t count, DataType t, ReduceOp op) {
  switch (t) {
    case DataType::kFloat32:
      return MakeRing<float>(ctx, buf, count, op);
    case DataType::kFloat64:
      return MakeRing<double>(ctx, buf, count, op);
    case DataType::kInt32:
      return MakeRing<int32_t>(ctx, buf, count, op);
    case DataType::kInt64:
      return MakeRing<int64_t>(ctx, buf, count, op);
    default:
      return nullptr;
  }
}

int RunRank(const Options& o, const RankEnv& env) {
  const std::string dir = env.rendezvous.substr(std::string("file://").size());
  try {
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(env.rank, env.size);
    context->setTimeout(std::chrono::seconds(120));
    gloo::rendezvous::FileStore store(dir);
    context->connectFullMesh(store, device);

    using Key = std::tuple<void*, size_t, DataType, ReduceOp>;
    std::map<Key, std::unique_ptr<gloo::Algorithm>> algorithms;
    Path path;
    path.rank = env.rank;
    path.np = env.size;
    path.impl = "gloo";
    // Runs the algorithm bound to (buf, count, t, op), built on first use.
    auto run_on = [&](void* buf, size_t count, DataType t, ReduceOp op) -> Status {
      std::unique_ptr<gloo::Algorithm>& a = algorithms[Key{buf, count, t, op}];
      if (!a) a = MakeAlgorithm(context, buf, count, t, op);
      if (!a) {
        return InvalidArgument("Gloo's ring has no " + std::string(DataTypeName(t)) + " " +
                               std::string(ReduceOpName(op)));
      }
      a->run();
      return Status::OK();
    };
    alignas(8) char scalar[8];
    path.allreduce = [&](void* buf, size_t count, DataType t, ReduceOp op) -> Status {
      if (count > static_cast<size_t>(INT_MAX)) {
        return InvalidArgument(std::to_string(count) + " elements: Gloo's counts are ints");
      }
      if (count != 1) return run_on(buf, count, t, op);
      // The loop's scalar reductions (slowest time, wrong count) pass stack variables: they go
      // through a buffer of our own, so that every algorithm stays bound to live memory.
      std::memcpy(scalar, buf, DataTypeSize(t));
      Status s = run_on(scalar, 1, t, op);
      std::memcpy(buf, scalar, DataTypeSize(t));
      return s;
    };
    gloo::BarrierAllToAll barrier(context);
    path.barrier = [&] {
      barrier.run();
      return Status::OK();
    };
    if (env.rank == 0) {
      PrintHeader(o, "gloo_allreduce: gloo::AllreduceRingChunked over TCP 127.0.0.1", env.size);
    }
    int64_t wrong = 0;
    Status s = RunSizes(path, o, {}, &wrong);
    if (!s.ok()) {
      std::fprintf(stderr, "gloo_allreduce: rank %d: %s\n", env.rank, s.ToString().c_str());
      return kExitFailed;
    }
    if (env.rank == 0) std::printf("# wrong values: %lld\n", static_cast<long long>(wrong));
    std::fflush(stdout);
    return wrong == 0 ? 0 : kExitWrong;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: rank %d: %s\n", env.rank, e.what());
    return kExitFailed;
  }
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  using namespace hvd::bench;
  Options o;
  o.sizes = {4 << 10};
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   if (flag == "-np") {
                     long long n;
                     if (!ParseInt(v, 1, 64, &n)) bad("a rank count 1..64, e.g. -np 4");
                     o.np = static_cast<int>(n);
                     return true;
                   }
                   return ParseLoopFlag(flag, v, bad, &o);
                 });
  if (o.dtype != hvd::DataType::kFloat32 && o.dtype != hvd::DataType::kFloat64 &&
      o.dtype != hvd::DataType::kInt32 && o.dtype != hvd::DataType::kInt64) {
    Usage("-t: this benchmark runs Gloo on float32, float64, int32 or int64");
  }
  if (o.op == hvd::ReduceOp::kAverage) Usage("-o: Gloo has no average");
  return LaunchRanks("gloo_allreduce", o.np, [&](const RankEnv& env) { return RunRank(o, env); });
}
