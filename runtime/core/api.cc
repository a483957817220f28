// The public C++ API (hvd/hvd.h): validates the caller's arguments, turns each call into an
// internal::Operation and hands it to the engine.
#include <algorithm>
#include <map>

#include "base/mutex.h"
#include "collectives/reduce.h"
#include "core/api_checks.h"
#include "core/api_internal.h"
#include "core/context.h"
#include "core/operation.h"
#include "hvd/hvd.h"

namespace hvd {
namespace {

using runtime::core::Context;
using runtime::negotiation::OpType;
using runtime::negotiation::OpTypeName;
using runtime::negotiation::Request;
using runtime::negotiation::ShapeString;
using runtime::negotiation::TensorSpec;

base::Mutex g_noname_mu;
std::map<int, uint64_t> g_noname HVD_GUARDED_BY(g_noname_mu);  // per process set
thread_local bool t_caller_waits = false;                      // inside a CallerWaits scope...
thread_local std::chrono::steady_clock::time_point t_caller_until =  // ...running rounds until
    std::chrono::steady_clock::time_point::max();

// Unnamed operations are numbered per process set: every member submits the same unnamed
// operations of that set in the same order, but ranks outside it do not, so one counter for
// every set would give the members of the next set different names. Written into `name`, whose
// memory is reused (Operation::Reused).
void NameInto(std::string_view given, OpType type, int process_set, std::string* name) {
  if (!given.empty()) {
    name->assign(given);
    return;
  }
  uint64_t n;
  {
    base::MutexLock lock(&g_noname_mu);
    n = g_noname[process_set]++;
  }
  name->clear();
  name->reserve(48);  // one allocation at most: the numbers fit
  name->append(OpTypeName(type)).append(".noname.");
  if (process_set != kGlobalProcessSet)
    name->append("set").append(std::to_string(process_set)).append(".");
  name->append(std::to_string(n));
}

std::string Name(std::string_view given, OpType type, int process_set) {
  std::string name;
  NameInto(given, type, process_set, &name);
  return name;
}

// Into `spec`'s memory (Operation::Reused).
void SpecInto(const std::string& name, const Tensor& t, TensorSpec* spec) {
  spec->name.assign(name);
  spec->dtype = t.dtype;
  spec->shape.assign(t.shape.begin(), t.shape.end());
}

TensorSpec Spec(const std::string& name, const Tensor& t) {
  TensorSpec spec;
  SpecInto(name, t, &spec);
  return spec;
}

void SetReduce(Request& r, const AllreduceOptions& o) {
  r.reduce_op = o.op;
  r.prescale = o.prescale;
  r.postscale = o.postscale;
}

}  // namespace

namespace internal {

void ResetUnnamedNames() {
  base::MutexLock names(&g_noname_mu);
  g_noname.clear();
}

// Submits `op`, or completes it at once with `error`.
Handle Submit(std::shared_ptr<Operation> op, const Status& error) {
  Status s = error;
  if (s.ok() && InForkedChild()) s = ForkedChildError(OpTypeName(op->request.type));
  if (s.ok()) s = SetDevice(*op);
  if (!s.ok()) {
    op->Complete(
        s.WithContext(std::string(OpTypeName(op->request.type)) + " '" + op->request.key + "'"));
    return Handle(op);
  }
  std::shared_ptr<Context> ctx = Current();
  if (!ctx) {
    op->Complete(FailedPrecondition(std::string(OpTypeName(op->request.type)) + " '" +
                                    op->request.key + "': " + internal::NotInitialized()));
    return Handle(op);
  }
  ctx->engine().Enqueue(op, t_caller_waits, t_caller_until);
  return Handle(op);
}

void RunRoundsUntilDone(Operation* op, std::chrono::steady_clock::time_point until) {
  // Not from a callback (it would wait for the token it holds), nor under g_mu for nothing, nor
  // in a forked child over the parent's connections.
  if (op->done() || OnBackgroundThread() || op->engine == nullptr || InForkedChild()) return;
  if (std::shared_ptr<Context> ctx = Current()) ctx->engine().RunUntilDone(op, until);
}

CallerWaits::CallerWaits(std::chrono::steady_clock::time_point until)
    : was_(t_caller_waits), was_until_(t_caller_until) {
  t_caller_waits = true;
  t_caller_until = until;
}
CallerWaits::~CallerWaits() {
  t_caller_waits = was_;
  t_caller_until = was_until_;
}

std::shared_ptr<Operation> NewOp(OpType type, std::string key, Callback cb, int process_set) {
  auto op = std::make_shared<Operation>();
  op->request.type = type;
  op->request.key = std::move(key);
  op->request.process_set = process_set;
  op->callback = std::move(cb);
  return op;
}

}  // namespace internal

using internal::CheckPair;
using internal::CheckReduce;
using internal::CheckReduceFor;
using internal::CheckScatterOp;
using internal::CheckTensor;
using internal::Current;
using internal::NewOp;
using internal::NotFromCallback;
using internal::Submit;

Handle AllreduceAsync(std::string_view name, const Tensor& input, const Tensor& output,
                      const AllreduceOptions& options) {
  // The most frequent operation by far (every gradient): its operation is reused, and each of
  // the four fields Reused() leaves to the caller is assigned into, not rebuilt.
  auto op = internal::Operation::Reused();
  Request& r = op->request;
  r.type = OpType::kAllreduce;
  r.process_set = options.process_set;
  NameInto(name, OpType::kAllreduce, options.process_set, &r.key);
  op->callback = options.callback;
  SetReduce(r, options);
  r.tensors.resize(1);
  SpecInto(r.key, input, &r.tensors[0]);
  op->inputs.resize(1);
  op->inputs[0] = input;
  op->outputs.resize(1);
  op->outputs[0] = output;
  Status s = CheckReduce(options);
  if (s.ok()) s = CheckPair(input, output);
  if (s.ok()) s = CheckReduceFor(options, input);
  return Submit(op, s);
}

Status Allreduce(std::string_view name, const Tensor& input, const Tensor& output,
                 const AllreduceOptions& options) {
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::Allreduce"));
  internal::CallerWaits waits;
  return AllreduceAsync(name, input, output, options).Wait();
}

Handle GroupedAllreduceAsync(std::string_view group_name, const std::vector<Tensor>& inputs,
                             const std::vector<Tensor>& outputs, const AllreduceOptions& options) {
  const std::string group = Name(group_name, OpType::kAllreduce, options.process_set);
  auto op = NewOp(OpType::kAllreduce, "group:" + group, options.callback, options.process_set);
  SetReduce(op->request, options);
  op->inputs = inputs;
  op->outputs = outputs;
  Status s = CheckReduce(options);
  if (s.ok() && inputs.size() != outputs.size()) {
    s = InvalidArgument(std::to_string(inputs.size()) + " inputs but " +
                        std::to_string(outputs.size()) + " outputs; give one output per input");
  }
  if (s.ok() && inputs.empty())
    s = InvalidArgument("a grouped allreduce needs at least one tensor");
  for (size_t i = 0; s.ok() && i < inputs.size(); ++i) {
    s = CheckPair(inputs[i], outputs[i]).WithContext("tensor " + std::to_string(i));
    if (s.ok()) s = CheckReduceFor(options, inputs[i]).WithContext("tensor " + std::to_string(i));
    op->request.tensors.push_back(Spec(group + "." + std::to_string(i), inputs[i]));
  }
  return Submit(op, s);
}

Status GroupedAllreduce(std::string_view group_name, const std::vector<Tensor>& inputs,
                        const std::vector<Tensor>& outputs, const AllreduceOptions& options) {
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::GroupedAllreduce"));
  internal::CallerWaits waits;
  return GroupedAllreduceAsync(group_name, inputs, outputs, options).Wait();
}

Handle AllgatherAsync(std::string_view name, const Tensor& input, Callback cb, int process_set) {
  auto op = NewOp(OpType::kAllgather, Name(name, OpType::kAllgather, process_set), std::move(cb),
                  process_set);
  op->request.tensors.push_back(Spec(op->request.key, input));
  op->inputs = {input};
  Status s = CheckTensor("input", input);
  if (s.ok() && input.shape.empty()) {
    s = InvalidArgument("allgather needs a tensor with a first dimension, not a scalar");
  }
  return Submit(op, s);
}

Handle GroupedAllgatherAsync(std::string_view group_name, const std::vector<Tensor>& inputs,
                             Callback cb, int process_set) {
  const std::string group = Name(group_name, OpType::kAllgather, process_set);
  auto op = NewOp(OpType::kAllgather, "group:" + group, std::move(cb), process_set);
  op->inputs = inputs;
  Status s;
  if (inputs.empty()) s = InvalidArgument("a grouped allgather needs at least one tensor");
  for (size_t i = 0; s.ok() && i < inputs.size(); ++i) {
    s = CheckTensor("input", inputs[i]).WithContext("tensor " + std::to_string(i));
    if (s.ok() && inputs[i].shape.empty()) {
      s = InvalidArgument("tensor " + std::to_string(i) +
                          ": allgather needs a tensor with a first dimension, not a scalar");
    }
    op->request.tensors.push_back(Spec(group + "." + std::to_string(i), inputs[i]));
  }
  return Submit(op, s);
}

Handle AllgatherBytesAsync(std::string_view name, const void* data, size_t n, Callback cb,
                           int process_set) {
  Tensor t{const_cast<void*>(data), DataType::kUInt8, {static_cast<int64_t>(n)}};
  return AllgatherAsync(name, t, std::move(cb), process_set);
}

Handle BroadcastAsync(std::string_view name, const Tensor& tensor, int root, Callback cb,
                      int process_set) {
  auto op = NewOp(OpType::kBroadcast, Name(name, OpType::kBroadcast, process_set), std::move(cb),
                  process_set);
  op->request.tensors.push_back(Spec(op->request.key, tensor));
  op->request.root = root;
  op->inputs = {tensor};
  op->outputs = {tensor};
  Status s = CheckTensor("tensor", tensor);
  const int size = Size();
  if (s.ok() && size > 0 && (root < 0 || root >= size)) {
    s = InvalidArgument("root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(size) + ")");
  }
  return Submit(op, s);
}

Handle BroadcastBytesAsync(std::string_view name, const void* data, size_t n, int root, Callback cb,
                           int process_set) {
  // Only the root's size counts: the others take it from the negotiation (Request::sized_by_root).
  const bool is_root = Rank() == root;
  Tensor t{is_root ? const_cast<void*>(data) : nullptr,
           DataType::kUInt8,
           {is_root ? static_cast<int64_t>(n) : 0}};
  if (is_root && data == nullptr && n > 0) {
    // Named as on success, so an unnamed call still takes its number in the set's sequence.
    return Submit(NewOp(OpType::kBroadcast, Name(name, OpType::kBroadcast, process_set),
                        std::move(cb), process_set),
                  InvalidArgument("data is null for " + std::to_string(n) + " bytes"));
  }
  auto op = NewOp(OpType::kBroadcast, Name(name, OpType::kBroadcast, process_set), std::move(cb),
                  process_set);
  op->request.tensors.push_back(Spec(op->request.key, t));
  op->request.root = root;
  op->request.sized_by_root = true;
  op->inputs = {t};
  op->outputs = {t};
  Status s;
  const int size = Size();
  if (size > 0 && (root < 0 || root >= size)) {
    s = InvalidArgument("root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(size) + ")");
  }
  return Submit(op, s);
}

Status Broadcast(std::string_view name, const Tensor& tensor, int root, int process_set) {
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::Broadcast"));
  internal::CallerWaits waits;
  return BroadcastAsync(name, tensor, root, {}, process_set).Wait();
}

Handle AlltoallAsync(std::string_view name, const Tensor& input, const std::vector<int64_t>& splits,
                     Callback cb, int process_set) {
  auto op = NewOp(OpType::kAlltoall, Name(name, OpType::kAlltoall, process_set), std::move(cb),
                  process_set);
  op->request.tensors.push_back(Spec(op->request.key, input));
  op->inputs = {input};
  Status s = CheckTensor("input", input);
  const int size = ProcessSetSize(process_set);
  if (s.ok() && input.shape.empty()) {
    s = InvalidArgument("alltoall needs a tensor with a first dimension, not a scalar");
  }
  if (s.ok() && size > 0) {
    const int64_t rows = input.shape[0];
    if (splits.empty()) {
      if (rows % size != 0) {
        s = InvalidArgument("first dimension " + std::to_string(rows) +
                            " does not divide evenly among " + std::to_string(size) +
                            " ranks; pass explicit splits");
      }
      op->request.splits.assign(size, rows / size);
    } else {
      // Horovod's rule: the rows past the splits' sum are not sent (a buffer larger than this
      // step's data). Summed without overflow: each entry is checked against what is left.
      int64_t sum = 0;
      bool bad = false;
      for (int64_t x : splits) {
        bad |= x < 0 || x > rows - sum;
        if (!bad) sum += x;
      }
      if (static_cast<int>(splits.size()) != size || bad) {
        s = InvalidArgument("splits " + ShapeString(splits) + " must have " + std::to_string(size) +
                            " non-negative entries summing to at most the first dimension " +
                            std::to_string(rows));
      }
      op->request.splits = splits;
    }
  }
  return Submit(op, s);
}

Handle ReducescatterAsync(std::string_view name, const Tensor& input,
                          const AllreduceOptions& options) {
  auto op = NewOp(OpType::kReducescatter, Name(name, OpType::kReducescatter, options.process_set),
                  options.callback, options.process_set);
  SetReduce(op->request, options);
  op->request.tensors.push_back(Spec(op->request.key, input));
  op->inputs = {input};
  Status s = CheckScatterOp(options);
  if (s.ok()) s = CheckTensor("input", input);
  if (s.ok()) s = CheckReduceFor(options, input);
  if (s.ok() && input.shape.empty()) {
    s = InvalidArgument("reducescatter needs a tensor with a first dimension, not a scalar");
  }
  return Submit(op, s);
}

Handle GroupedReducescatterAsync(std::string_view group_name, const std::vector<Tensor>& inputs,
                                 const AllreduceOptions& options) {
  const std::string group = Name(group_name, OpType::kReducescatter, options.process_set);
  auto op = NewOp(OpType::kReducescatter, "group:" + group, options.callback, options.process_set);
  SetReduce(op->request, options);
  op->inputs = inputs;
  Status s = CheckScatterOp(options);
  if (s.ok() && inputs.empty()) {
    s = InvalidArgument("a grouped reducescatter needs at least one tensor");
  }
  for (size_t i = 0; s.ok() && i < inputs.size(); ++i) {
    const std::string which = "tensor " + std::to_string(i);
    s = CheckTensor("input", inputs[i]).WithContext(which);
    if (s.ok()) s = CheckReduceFor(options, inputs[i]).WithContext(which);
    if (s.ok() && inputs[i].shape.empty()) {
      s = InvalidArgument(which +
                          ": reducescatter needs a tensor with a first dimension, not a "
                          "scalar");
    }
    op->request.tensors.push_back(Spec(group + "." + std::to_string(i), inputs[i]));
  }
  return Submit(op, s);
}

Handle BarrierAsync(int process_set, Callback cb) {
  return Submit(NewOp(OpType::kBarrier, "__barrier__", std::move(cb), process_set));
}

Status Barrier(int process_set) {
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::Barrier"));
  internal::CallerWaits waits;
  return BarrierAsync(process_set).Wait();
}

Handle JoinAsync(int process_set, Callback cb) {
  return Submit(NewOp(OpType::kJoin, "__join__", std::move(cb), process_set));
}

Status Join(int* last_joined_rank, int process_set) {
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::Join"));
  internal::CallerWaits waits;
  Handle h = JoinAsync(process_set);
  Status s = h.Wait();
  if (s.ok() && last_joined_rank != nullptr) *last_joined_rank = h.last_joined_rank();
  return s;
}

}  // namespace hvd
