// Negotiation messages: what a rank says it is ready to do (Request), and what the coordinator
// tells every rank to do (Response).
//
// Vocabulary:
//   key      - the unit of negotiation. A single operation's key is its tensor name; a grouped
//              allreduce's key is "group:" + the group name, and all its tensors travel together.
//   request  - one rank's submission of one key: op type, tensors (name, dtype, shape), reduce op,
//              scales, root, splits.
//   response - the coordinator's decision for one key, identical on every rank: run it (with the
//              agreed specs, and per-rank data where ranks differ legitimately, such as allgather's
//              first dimensions), or fail it everywhere with `error`.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "hvd/types.h"

namespace hvd::runtime::negotiation {

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  // Process-set changes, negotiated in the global set so every rank applies them in the same
  // cycle (core/engine.h, "Process sets").
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
};
const char* OpTypeName(OpType t);      // "allreduce", ...
const char* OpTypeActivity(OpType t);  // "ALLREDUCE", ... (timeline)

struct TensorSpec {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;

  int64_t num_elements() const;
  bool operator==(const TensorSpec&) const = default;
};
std::string ShapeString(const std::vector<int64_t>& shape);  // "[10, 4]"

// No tensor is larger than this (256 TiB: past any process's address space). The runtime sizes
// buffers from shapes, so a bogus one is refused before anything is allocated.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;
// `rows` rows of `row_shape` (dimensions 1.. of a shape; all >= 0) in `dtype`: its bytes in
// *bytes; false when that, or any one dimension, is over kMaxTensorBytes.
bool BytesWithin(DataType dtype, int64_t rows, std::span<const int64_t> row_shape, uint64_t* bytes);

struct Request {
  int32_t rank = 0;
  OpType type = OpType::kAllreduce;
  std::string key;
  std::vector<TensorSpec> tensors;  // 1, or a group's members; none for barrier/join
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;  // broadcast (a rank of the process set)
  // Broadcast: the other ranks do not know the size; they take the root's shape (byte
  // broadcasts of pickled objects). Every rank of one key must agree on it.
  bool sized_by_root = false;
  // The tensors are in CUDA device memory (every tensor of one operation is on one device). Every
  // rank must agree: the collective then runs on GPUs (NCCL, or staged through host memory).
  bool gpu = false;
  std::vector<int64_t> splits;  // alltoall: rows to each rank; add_process_set: the set's ranks
  int64_t age_ms = 0;           // how long it had waited on its rank when sent (stall inspector)
  // Not on the wire: the process set the operation was submitted to (its members negotiate it);
  // remove_process_set carries the id to remove in `root`.
  int32_t process_set = 0;
};

struct Response {
  OpType type = OpType::kAllreduce;
  std::string key;
  std::vector<TensorSpec> tensors;  // as agreed (for allgather/alltoall: rank 0's view of dims 1..)
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = 0;
  bool sized_by_root = false;       // broadcast: `tensors` is the root's
  bool gpu = false;                 // as Request::gpu, agreed by every rank
  std::vector<int64_t> first_dims;  // allgather: rows per rank (of each tensor, tensor-major)
  std::vector<int64_t> splits;      // alltoall: size x size matrix, row = sender
  int32_t last_joined_rank = -1;    // join
  // Allreduce/reducescatter from the coordinator: the ranks that submitted the key, i.e. that
  // contribute data (averages divide by it). A rank may have joined after submitting, so this is
  // not size minus the joined ranks. 0: not recorded (responses run from the response cache,
  // whose participants are exactly the ranks that have not joined).
  int32_t contributors = 0;
  std::string error;  // non-empty: fail the key on every rank with this message
  // With an error: a stall verdict (HVD_STALL_SHUTDOWN_TIME_SECONDS) when non-empty, the job
  // ranks that had not submitted the key. Ranks failing it report them to the launcher.
  std::vector<int64_t> stalled_ranks;

  bool ok() const { return error.empty(); }
};

// One rank's message to the coordinator in a cycle that takes the slow path.
struct RequestList {
  int32_t rank = 0;
  std::vector<Request> requests;
};

// The coordinator's answer, the same on every rank.
struct ResponseList {
  std::vector<Response> responses;
  std::vector<int32_t> joined_ranks;  // ranks that have joined and not yet been released
};

std::string Encode(const RequestList& list);
std::string Encode(const ResponseList& list);
Status Decode(const std::string& data, RequestList* list);
Status Decode(const std::string& data, ResponseList* list);

}  // namespace hvd::runtime::negotiation
