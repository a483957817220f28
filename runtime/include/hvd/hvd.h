// hvd: the API a training process uses. Four lines make a script data-parallel:
//
//   HVD_CHECK_OK(hvd::Init());                              // ranks meet through the environment
//   ... pin this process to hvd::LocalRank()'s device ...
//   hvd::Broadcast("weights", weights, /*root=*/0);         // start from identical parameters
//   hvd::Allreduce("grad.fc1", grad, grad);                 // average gradients every step
//
// Every operation is collective: every rank submits a tensor of the same name; hvd's background
// thread negotiates which names are ready everywhere, fuses them into one buffer and runs one
// collective. Operations return a Handle at once (asynchronous) or, in the *Sync-less variants,
// block until done. Tensors are the caller's memory and must stay valid until the operation
// completes. Names must be unique among operations in flight.
//
// Thread safety: every function may be called from any thread after Init().
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"
#include "hvd/types.h"

#if defined(_WIN32)
#define HVD_EXPORT
#else
#define HVD_EXPORT __attribute__((visibility("default")))
#endif

namespace hvd {

// ---- Lifecycle and topology -------------------------------------------------------------------

// Overrides of what Init() otherwise reads from the environment (see docs/configuration.md).
struct InitOptions {
  int rank = -1;           // HVD_RANK / HOROVOD_RANK
  int size = -1;           // HVD_SIZE / HOROVOD_SIZE
  std::string rendezvous;  // HVD_RENDEZVOUS: "file:///dir" (or a directory path)
  // Process sets registered at init, ids 1, 2, ... in this order (in addition to
  // HVD_PROCESS_SETS, whose sets come first). Every rank must pass the same sets. An entry whose
  // ranks are already registered (every rank: the global set; or an earlier entry) is that set
  // and takes no id of its own: ProcessSetIds()/ProcessSetRanks() say which id has which ranks.
  std::vector<std::vector<int>> process_sets;
  // Allows AddProcessSet/RemoveProcessSet after init (as HVD_DYNAMIC_PROCESS_SETS=1).
  bool dynamic_process_sets = false;
};

// Joins this process to its job: reads rank, size and the rendezvous address from the
// environment, meets the other ranks, and starts the background thread. With no HVD_SIZE (or
// HOROVOD_SIZE) in the environment it runs as a single process (rank 0 of 1) and says so at INFO.
// Errors name the variable or the ranks that did not show up. On an initialized process Init()
// succeeds and does nothing (as Horovod's hvd.init()); after Shutdown() it starts a new session:
// new connections, a new rendezvous round, empty caches.
HVD_EXPORT Status Init();
HVD_EXPORT Status Init(const InitOptions& options);

// Stops the background thread and closes connections; every rank stops in the same negotiation
// cycle. Operations still pending on any rank fail with Aborted ("hvd was shut down ... while this
// operation was pending"). Safe to call when not initialized, and more than once.
HVD_EXPORT Status Shutdown();

HVD_EXPORT bool IsInitialized();
// Topology, as Horovod defines it; -1 before Init().
HVD_EXPORT int Rank();
HVD_EXPORT int Size();
HVD_EXPORT int LocalRank();  // rank among the processes on this host
HVD_EXPORT int LocalSize();  // number of processes on this host
HVD_EXPORT int CrossRank();  // index of this host among hosts with a process of this local rank
HVD_EXPORT int CrossSize();  // number of hosts with a process of this local rank
// Whether every host runs the same number of ranks (false before Init()).
HVD_EXPORT bool IsHomogeneous();

// ---- Elastic jobs (hvdrun --min-np/--max-np; docs/elastic.md) ------------------------------
// An elastic worker's Init() joins the newest membership the launcher published (its rank and
// size come from it, not from HVD_RANK/HVD_SIZE). When a worker leaves, the others' pending
// operations fail (Aborted or Unavailable); Shutdown() and Init() again join the new membership
// in place, and the program restores its state. When workers join, ElasticGeneration() shows a
// newer generation than the one joined: Shutdown() and Init() at a point every rank agrees on.

// Whether this process is an elastic worker (HVD_ELASTIC=1); known before Init().
HVD_EXPORT bool IsElastic();
struct ElasticGenerationInfo {
  int64_t joined = 0;         // the generation this session joined
  int64_t latest = 0;         // the newest published (>= joined)
  bool only_removed = false;  // the newest only lost workers (no state sync needed)
};
// FailedPrecondition when not initialized or not elastic.
HVD_EXPORT Status ElasticGeneration(ElasticGenerationInfo* info);
// Call after saving (committing) a state that was synced with the others: tells the launcher
// that this worker holds the training state, which a discovery script's shrinking waits for
// before stopping the workers that would otherwise be rank 0's source (docs/elastic.md
// "Shrinking"). Cheap: it writes once per session, then at most every 10 s. OK when the write
// failed (logged; tried again next time); FailedPrecondition when not initialized or not elastic.
HVD_EXPORT Status ElasticCommitted();

// ---- Process sets (Horovod 0.23+) ----------------------------------------------------------
// A process set is a subset of the job's ranks that runs collectives among themselves; every
// operation takes one (the global set, id 0, is every rank). Only the set's members negotiate and
// move its data, over the links already open between them. Ranks are always job ranks.

inline constexpr int kGlobalProcessSet = 0;

// Adds a set of the job's ranks (any order; kept sorted) and returns its id. Collective over the
// whole job: every rank must call it with the same ranks (a mismatch fails it on every rank,
// naming what each passed). Needs dynamic process sets (InitOptions or
// HVD_DYNAMIC_PROCESS_SETS=1); AlreadyExists when a set with these ranks exists.
HVD_EXPORT Status AddProcessSet(const std::vector<int>& ranks, int* id);
// Removes a set (collective over the whole job, like AddProcessSet); its pending operations fail.
HVD_EXPORT Status RemoveProcessSet(int id);
// This rank's rank within the set; -1 when it is not a member, the set does not exist or hvd is
// not initialized.
HVD_EXPORT int ProcessSetRank(int id);
// The number of ranks in the set; -1 when it does not exist or hvd is not initialized.
HVD_EXPORT int ProcessSetSize(int id);
HVD_EXPORT bool ProcessSetIncluded(int id);
// The set's job ranks, sorted. NotFound when it does not exist.
HVD_EXPORT Status ProcessSetRanks(int id, std::vector<int>* ranks);
// Every registered set's id, increasing (empty before Init()).
HVD_EXPORT std::vector<int> ProcessSetIds();

// ---- Timeline ---------------------------------------------------------------------------------
// Starts writing a Chrome trace to `path` (written by rank 0, as Horovod's; the call is accepted
// on every rank, and only rank 0 opens the file, so only rank 0 can report an unwritable path).
// `mark_cycles` adds an instant event per negotiation cycle. FailedPrecondition when already
// started or not initialized; InvalidArgument when the file cannot be created.
HVD_EXPORT Status StartTimeline(const std::string& path, bool mark_cycles = false);
// Stops recording; the file is then complete, valid JSON. FailedPrecondition when not recording.
HVD_EXPORT Status StopTimeline();

// ---- Tensors and handles ----------------------------------------------------------------------

// A view of the caller's memory: a dense row-major array. An empty shape is a scalar.
struct Tensor {
  void* data = nullptr;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  // -1: host memory. >= 0: memory on that CUDA device, produced on `stream` (a cudaStream_t;
  // null: the legacy default stream). The runtime's work on it runs after everything enqueued on
  // `stream` so far, and the operation completes once that work is done (the memory is then
  // ready for any stream). Every tensor of one operation is on one device. Where this process
  // cannot use a GPU, a device tensor fails with FailedPrecondition saying why (docs/gpu.md).
  // Results the runtime owns (Handle::output_data) are on this device where the process set runs
  // NCCL, else in host memory (Handle::output_device says which).
  int device = -1;
  void* stream = nullptr;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t num_bytes() const { return static_cast<size_t>(num_elements()) * DataTypeSize(dtype); }
};

// Shorthand for a 1-D tensor of `count` elements.
inline Tensor MakeTensor(void* data, DataType dtype, int64_t count) {
  return Tensor{data, dtype, {count}};
}

namespace internal {
class Operation;
}

// Called once, on the background thread, when the operation completes (before Ready() turns true
// and Wait() returns). Must not block: Shutdown(), the synchronous operations and Wait() on an
// operation not yet complete fail with FailedPrecondition when called from a callback. Must not
// throw: an exception it throws is logged at ERROR and dropped.
using Callback = std::function<void(const Status&)>;

// Shared handle to one submitted operation. Cheap to copy.
class HVD_EXPORT Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<internal::Operation> op);

  bool valid() const { return op_ != nullptr; }
  // True once the operation has completed (successfully or not). REQUIRES: valid().
  bool Ready() const;
  // Blocks until completion; returns the operation's status.
  Status Wait() const;
  // As Wait(), but DeadlineExceeded if not complete after `timeout` (the operation goes on).
  Status WaitFor(std::chrono::milliseconds timeout) const;

  // Results owned by the handle (allgather, alltoall, reducescatter, a byte broadcast on the
  // ranks that received), one per tensor of the operation (a grouped operation has several);
  // empty for the others. REQUIRES: Ready() and OK.
  size_t output_count() const;
  const void* output_data(size_t i = 0) const;
  size_t output_bytes(size_t i = 0) const;
  // Where output_data(i) is: -1 host memory, else that CUDA device (an operation on device tensors
  // of a process set that runs NCCL). Device results are ready for any stream once the operation
  // completes, and are freed with the handle's last copy, in order after the stream the inputs
  // named (use them on other streams only before that, or copy them).
  int output_device(size_t i = 0) const;
  const std::vector<int64_t>& output_shape(size_t i = 0) const;
  // First-dimension rows per rank of the process set, in its rank order: allgather, gathered
  // from each; alltoall, received from each; reducescatter, the share each got.
  const std::vector<int64_t>& output_splits(size_t i = 0) const;
  // Alltoall: output_splits(0).
  const std::vector<int64_t>& received_splits() const;
  // JoinAsync: the (job) rank that joined last; -1 for other operations.
  int last_joined_rank() const;

 private:
  std::shared_ptr<internal::Operation> op_;
};

// ---- Operations -------------------------------------------------------------------------------
// An empty name is replaced by "<op>.noname.<n>", n counting per process: valid only when every
// rank submits unnamed operations in the same order.

struct AllreduceOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale = 1.0;   // multiplies the input before the reduction
  double postscale = 1.0;  // multiplies the result after it (and after averaging)
  Callback callback;
  int process_set = kGlobalProcessSet;
};

// Reduces `input` across ranks into `output` (same dtype and element count; may be the same
// memory for an in-place reduction).
HVD_EXPORT Handle AllreduceAsync(std::string_view name, const Tensor& input, const Tensor& output,
                                 const AllreduceOptions& options = {});
HVD_EXPORT Status Allreduce(std::string_view name, const Tensor& input, const Tensor& output,
                            const AllreduceOptions& options = {});

// Reduces a list as one unit: negotiated together, fused together, completed together, in the
// list's order (deterministic results run to run). Tensor i is named "<group_name>.<i>".
HVD_EXPORT Handle GroupedAllreduceAsync(std::string_view group_name,
                                        const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& outputs,
                                        const AllreduceOptions& options = {});
HVD_EXPORT Status GroupedAllreduce(std::string_view group_name, const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& outputs,
                                   const AllreduceOptions& options = {});

// Concatenates every rank's `input` along the first dimension (which may differ per rank; the
// other dimensions must agree). The result is owned by the handle; output_splits() gives the rows
// from each rank.
HVD_EXPORT Handle AllgatherAsync(std::string_view name, const Tensor& input, Callback cb = {},
                                 int process_set = kGlobalProcessSet);
// Allgathers a list as one unit (negotiated and completed together); result i is input i's.
// Tensor i is named "<group_name>.<i>".
HVD_EXPORT Handle GroupedAllgatherAsync(std::string_view group_name,
                                        const std::vector<Tensor>& inputs, Callback cb = {},
                                        int process_set = kGlobalProcessSet);
// Allgathers `n` bytes from every rank, n differing per rank (pickled objects): the handle's
// output is the concatenation, output_splits() the byte count of each rank.
HVD_EXPORT Handle AllgatherBytesAsync(std::string_view name, const void* data, size_t n,
                                      Callback cb = {}, int process_set = kGlobalProcessSet);

// Copies `tensor` on `root` into `tensor` on every other rank. `root` is a job rank (a member of
// the process set).
HVD_EXPORT Handle BroadcastAsync(std::string_view name, const Tensor& tensor, int root,
                                 Callback cb = {}, int process_set = kGlobalProcessSet);
HVD_EXPORT Status Broadcast(std::string_view name, const Tensor& tensor, int root,
                            int process_set = kGlobalProcessSet);
// Broadcasts the root's `n` bytes (the others pass anything, e.g. nullptr and 0: they learn the
// size from the root). On every rank but the root the handle's output holds the bytes.
HVD_EXPORT Handle BroadcastBytesAsync(std::string_view name, const void* data, size_t n, int root,
                                      Callback cb = {}, int process_set = kGlobalProcessSet);

// Sends splits[p] first-dimension rows of `input` to rank p (in rank order); rows past the
// splits' sum are not sent (as Horovod: it may not exceed the first dimension). Empty `splits`
// divides the first dimension evenly (it must then be divisible by Size()). The received rows,
// concatenated in rank order, are owned by the handle; received_splits() says how many came
// from each rank.
HVD_EXPORT Handle AlltoallAsync(std::string_view name, const Tensor& input,
                                const std::vector<int64_t>& splits = {}, Callback cb = {},
                                int process_set = kGlobalProcessSet);

// Reduces `input` across ranks and leaves rank r its share of the first dimension (split as
// evenly as possible, lower ranks taking one extra row where it does not divide). The share is
// owned by the handle.
// Sum and average only, as Horovod (prescale/postscale apply as for allreduce); output_splits()
// gives every rank's share.
HVD_EXPORT Handle ReducescatterAsync(std::string_view name, const Tensor& input,
                                     const AllreduceOptions& options = {});
// Reducescatters a list as one unit; result i is input i's share.
HVD_EXPORT Handle GroupedReducescatterAsync(std::string_view group_name,
                                            const std::vector<Tensor>& inputs,
                                            const AllreduceOptions& options = {});

// Returns when every rank of the set has called Barrier.
HVD_EXPORT Status Barrier(int process_set = kGlobalProcessSet);
HVD_EXPORT Handle BarrierAsync(int process_set = kGlobalProcessSet, Callback cb = {});

// Tells the others this rank has run out of data. Until every rank of the set has joined, this
// rank takes part in the others' allreduces with zeros (averages divide by the ranks that
// contributed), broadcasts and allgathers, without submitting anything itself. Returns when all
// have joined; *last_joined_rank (optional) gets the (job) rank that joined last.
HVD_EXPORT Status Join(int* last_joined_rank = nullptr, int process_set = kGlobalProcessSet);
// Join as an operation: Handle::last_joined_rank() once it completes.
HVD_EXPORT Handle JoinAsync(int process_set = kGlobalProcessSet, Callback cb = {});

// ---- Local gradient aggregation ---------------------------------------------------------------

// Horovod's backward_passes_per_step: sums each gradient locally over N backward passes and
// allreduces once per N, averaged over passes and ranks.
//
//   hvd::LocalGradientAggregator agg(4);
//   for each backward pass: for each grad g: handles.push_back(agg.Add("grad.fc1", g));
//   a valid handle means that pass completed a step: Wait() it, then g holds the averaged sum.
class HVD_EXPORT LocalGradientAggregator {
 public:
  // REQUIRES: passes_per_step >= 1.
  explicit LocalGradientAggregator(int passes_per_step, ReduceOp op = ReduceOp::kAverage);
  ~LocalGradientAggregator();
  LocalGradientAggregator(const LocalGradientAggregator&) = delete;
  LocalGradientAggregator& operator=(const LocalGradientAggregator&) = delete;

  // Adds `grad` into the local sum named `name`. On the passes_per_step-th call for `name`, writes
  // the sum into `grad`, starts its allreduce in place and returns the handle; otherwise returns
  // an invalid handle. A gradient whose dtype or shape changes is an error (returned in a handle
  // that is already complete).
  Handle Add(std::string_view name, const Tensor& grad);

  int passes_per_step() const { return passes_; }

 private:
  struct Accumulator;
  int passes_;
  ReduceOp op_;
  std::vector<std::unique_ptr<Accumulator>> accumulators_;
};

}  // namespace hvd

// Aborts the process with the status message when `expr` is not OK (examples and tests).
#define HVD_CHECK_OK(expr)                                                                \
  do {                                                                                    \
    ::hvd::Status _hvd_s = (expr);                                                        \
    if (!_hvd_s.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, _hvd_s.ToString().c_str()); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
