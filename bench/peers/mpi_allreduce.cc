// mpi_allreduce: Open MPI's MPI_Allreduce (in place) timed and checked by the same loop as hvd's
// allreduce_bench (../allreduce_loop.h), for bench/peers/compare.py. Which transport Open MPI
// uses (shared memory: --mca btl self,vader; TCP: --mca btl self,tcp) is mpirun's choice; --impl
// names it in the RESULT lines.
//
//   mpirun -np 2 [mca flags] mpi_allreduce --impl mpi-shm [--sizes 4K,1M] [loop flags]
//
// Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 an MPI call failed.
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "allreduce_loop.h"
#include "bench_util.h"

namespace hvd::bench {
namespace {

struct Options : LoopOptions {
  std::string impl = "mpi";
};

int g_rank = 0;

[[noreturn]] void Usage(const std::string& error) {
  if (g_rank == 0) {
    if (!error.empty()) std::fprintf(stderr, "mpi_allreduce: %s\n", error.c_str());
    std::fprintf(error.empty() ? stdout : stderr,
                 "usage: mpirun -np N mpi_allreduce [--impl NAME] [loop flags]\n"
                 "  --impl NAME   the RESULT lines' impl= (default mpi)\n%s",
                 kLoopFlagsUsage);
  }
  MPI_Finalize();
  std::exit(error.empty() ? 0 : kExitUsage);
}

bool MpiType(DataType t, MPI_Datatype* out) {
  switch (t) {
    case DataType::kFloat32:
      *out = MPI_FLOAT;
      return true;
    case DataType::kFloat64:
      *out = MPI_DOUBLE;
      return true;
    case DataType::kInt8:
      *out = MPI_INT8_T;
      return true;
    case DataType::kUInt8:
      *out = MPI_UINT8_T;
      return true;
    case DataType::kInt32:
      *out = MPI_INT32_T;
      return true;
    case DataType::kInt64:
      *out = MPI_INT64_T;
      return true;
    case DataType::kInt16:
      *out = MPI_INT16_T;
      return true;
    default:
      // MPI has no standard half or bfloat16 type; its MPI_C_BOOL reduces only with MPI_LOR and
      // MPI_LAND, which MpiOp does not map (see main's message).
      return false;
  }
}

bool MpiOp(ReduceOp op, MPI_Op* out) {
  switch (op) {
    case ReduceOp::kSum:
      *out = MPI_SUM;
      return true;
    case ReduceOp::kMin:
      *out = MPI_MIN;
      return true;
    case ReduceOp::kMax:
      *out = MPI_MAX;
      return true;
    case ReduceOp::kProduct:
      *out = MPI_PROD;
      return true;
    default:
      return false;  // MPI has no average
  }
}

Status MpiStatus(const char* call, int rc) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Internal(std::string(call) + ": " + std::string(text, len));
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  using namespace hvd;
  using namespace hvd::bench;
  MPI_Init(&argc, &argv);
  int np = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

  Options o;
  o.sizes = {4 << 10};
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   if (flag == "--impl") {
                     o.impl = v;
                     return true;
                   }
                   return ParseLoopFlag(flag, v, bad, &o);
                 });
  MPI_Datatype type;
  MPI_Op op;
  if (o.dtype == DataType::kBool) {
    Usage(
        "-t bool: MPI reduces MPI_C_BOOL only with MPI_LOR/MPI_LAND, which this benchmark does "
        "not run; compare bool with allreduce_bench alone, or use uint8 with -o max or min");
  }
  if (!MpiType(o.dtype, &type))
    Usage("-t: MPI has no standard type for " + std::string(DataTypeName(o.dtype)));
  if (!MpiOp(o.op, &op)) Usage("-o: MPI has no " + std::string(ReduceOpName(o.op)));

  Path path;
  path.rank = g_rank;
  path.np = np;
  path.impl = o.impl;
  path.allreduce = [](void* buf, size_t count, DataType dtype, ReduceOp rop) {
    MPI_Datatype t;
    MPI_Op p;
    if (!MpiType(dtype, &t) || !MpiOp(rop, &p)) return InvalidArgument("unsupported by MPI");
    if (count > static_cast<size_t>(INT_MAX)) {
      return InvalidArgument(std::to_string(count) + " elements: MPI_Allreduce counts are ints");
    }
    return MpiStatus("MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), t,
                                                    p, MPI_COMM_WORLD));
  };
  path.barrier = [] { return MpiStatus("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD)); };

  if (g_rank == 0) PrintHeader(o, "mpi_allreduce: MPI_Allreduce in place (" + o.impl + ")", np);
  int64_t wrong = 0;
  Status s = RunSizes(path, o, {}, &wrong);
  if (!s.ok()) {
    std::fprintf(stderr, "mpi_allreduce: rank %d: %s\n", g_rank, s.ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, kExitFailed);
  }
  if (g_rank == 0) std::printf("# wrong values: %lld\n", static_cast<long long>(wrong));
  std::fflush(stdout);
  MPI_Finalize();
  return wrong == 0 ? 0 : kExitWrong;
}
