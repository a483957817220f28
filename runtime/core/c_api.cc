// The C ABI over the C++ API: opaque handles, integer status codes, thread-local error text.
#include "hvd/c_api.h"

#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "core/api_internal.h"
#include "core/c_api_status.h"
#include "core/operation.h"
#include "hvd/hvd.h"
#include "stall/native_stacks.h"

struct hvd_handle {
  hvd::Handle handle;
};

namespace {

thread_local std::string t_last_error;

int Report(const hvd::Status& s) {
  return hvd::internal::ReportToC(s);
}

hvd::Tensor MakeTensor(const void* data, hvd_dtype_t dtype, int ndim, const int64_t* shape) {
  hvd::Tensor t;
  t.data = const_cast<void*>(data);
  t.dtype = static_cast<hvd::DataType>(dtype);
  if (ndim > 0 && shape != nullptr) t.shape.assign(shape, shape + ndim);
  return t;
}

hvd_handle* Wrap(hvd::Handle h) {
  return new hvd_handle{std::move(h)};
}

// What is wrong with a shape that cannot be read (ndim < 0, or ndim > 0 with a NULL shape, which
// MakeTensor would otherwise take for a scalar: one element reduced); "" when nothing.
std::string BadShape(int ndim, const int64_t* shape) {
  if (ndim >= 0 && (ndim == 0 || shape != nullptr)) return "";
  return "has ndim " + std::to_string(ndim) +
         (ndim < 0 ? ", which is negative" : " but a NULL shape");
}

// The same for descriptors, and their reserved field, which must be 0: a descriptor built by
// a future header (a field hvd would ignore) or left uninitialized.
std::string BadShape(int n, const hvd_tensor* t) {
  for (int i = 0; i < n && t != nullptr; ++i) {
    const std::string bad = BadShape(t[i].ndim, t[i].shape);
    if (!bad.empty()) return "tensor " + std::to_string(i) + " " + bad;
    if (t[i].reserved != 0) {
      return "tensor " + std::to_string(i) + " has reserved = " + std::to_string(t[i].reserved) +
             "; it must be 0 (zero the whole hvd_tensor before filling it in)";
    }
  }
  return "";
}

// A handle already failed with InvalidArgument(what) (bad arguments caught at the ABI edge).
hvd::Handle FailedHandle(const std::string& what) {
  return hvd::Handle(hvd::internal::Operation::Failed(hvd::InvalidArgument(what)));
}

hvd_handle* Failed(const std::string& what) {
  return Wrap(FailedHandle(what));
}

hvd::AllreduceOptions Reduce(hvd_reduce_op_t op, double prescale, double postscale, int set) {
  hvd::AllreduceOptions o;
  o.op = static_cast<hvd::ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.process_set = set;
  return o;
}

const char* NameOr(const char* name) {
  return name ? name : "";
}

// The tensor `t` describes, in `*out` (its shape's memory reused: the allreduce entry points
// keep one per thread, since they run once per gradient and the runtime copies what it keeps).
const hvd::Tensor& Into(const hvd_tensor* t, hvd::Tensor* out) {
  out->data = t->data;
  out->dtype = static_cast<hvd::DataType>(t->dtype);
  if (t->ndim > 0 && t->shape != nullptr) {
    out->shape.assign(t->shape, t->shape + t->ndim);
  } else {
    out->shape.clear();
  }
  out->device = t->device;
  out->stream = t->stream;
  return *out;
}

hvd::Tensor FromC(const hvd_tensor* t) {
  hvd::Tensor out;
  if (t != nullptr) Into(t, &out);
  return out;
}

std::vector<hvd::Tensor> FromC(int n, const hvd_tensor* t) {
  std::vector<hvd::Tensor> out;
  for (int i = 0; i < n && t != nullptr; ++i) out.push_back(FromC(&t[i]));
  return out;
}

// hvd_enqueue_allreduce's operation (failed at once for unreadable descriptors).
hvd::Handle StartAllreduce(const char* name, const hvd_tensor* input, const hvd_tensor* output,
                           hvd_reduce_op_t op, double prescale, double postscale, int process_set) {
  if (input == nullptr || output == nullptr) {
    return FailedHandle("allreduce: input or output is NULL");
  }
  if (std::string bad = BadShape(1, input); !bad.empty()) {
    return FailedHandle("allreduce: input " + bad);
  }
  if (std::string bad = BadShape(1, output); !bad.empty()) {
    return FailedHandle("allreduce: output " + bad);
  }
  // AllreduceAsync copies both before it submits (a callback run on this thread that comes back
  // here finds nothing of them still in use).
  thread_local hvd::Tensor t_input, t_output;
  return hvd::AllreduceAsync(NameOr(name), Into(input, &t_input), Into(output, &t_output),
                             Reduce(op, prescale, postscale, process_set));
}

// A byte count past int64 became a negative dimension ("negative dimension in shape [-1]").
std::string BadByteCount(size_t n) {
  if (n <= static_cast<size_t>(INT64_MAX)) return "";
  return std::to_string(n) + " bytes is more than any buffer holds (the count wrapped around?)";
}

}  // namespace

int hvd::internal::ReportToC(const hvd::Status& s) {
  t_last_error = s.ok() ? "" : s.ToString();
  return static_cast<int>(s.code());
}

extern "C" {

int hvd_init(void) {
  return Report(hvd::Init());
}
int hvd_shutdown(void) {
  return Report(hvd::Shutdown());
}
int hvd_is_initialized(void) {
  return hvd::IsInitialized() ? 1 : 0;
}
int hvd_rank(void) {
  return hvd::Rank();
}
int hvd_size(void) {
  return hvd::Size();
}
int hvd_local_rank(void) {
  return hvd::LocalRank();
}
int hvd_local_size(void) {
  return hvd::LocalSize();
}
int hvd_cross_rank(void) {
  return hvd::CrossRank();
}
int hvd_cross_size(void) {
  return hvd::CrossSize();
}
const char* hvd_last_error(void) {
  return t_last_error.c_str();
}

hvd_handle* hvd_allreduce_async(const char* name, const void* sendbuf, void* recvbuf,
                                hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                hvd_reduce_op_t op, double prescale, double postscale) {
  hvd::AllreduceOptions o;
  o.op = static_cast<hvd::ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  if (const std::string bad = BadShape(ndim, shape); !bad.empty())
    return Failed("the tensor " + bad);
  return Wrap(hvd::AllreduceAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape),
                                  MakeTensor(recvbuf, dtype, ndim, shape), o));
}

hvd_handle* hvd_allgather_async(const char* name, const void* sendbuf, hvd_dtype_t dtype, int ndim,
                                const int64_t* shape) {
  if (const std::string bad = BadShape(ndim, shape); !bad.empty())
    return Failed("the tensor " + bad);
  return Wrap(hvd::AllgatherAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape)));
}

hvd_handle* hvd_broadcast_async(const char* name, void* buf, hvd_dtype_t dtype, int ndim,
                                const int64_t* shape, int root) {
  if (const std::string bad = BadShape(ndim, shape); !bad.empty())
    return Failed("the tensor " + bad);
  return Wrap(hvd::BroadcastAsync(name ? name : "", MakeTensor(buf, dtype, ndim, shape), root));
}

hvd_handle* hvd_alltoall_async(const char* name, const void* sendbuf, hvd_dtype_t dtype, int ndim,
                               const int64_t* shape, const int64_t* splits) {
  if (const std::string bad = BadShape(ndim, shape); !bad.empty())
    return Failed("the tensor " + bad);
  std::vector<int64_t> s;
  if (splits != nullptr && hvd::Size() > 0) s.assign(splits, splits + hvd::Size());
  return Wrap(hvd::AlltoallAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape), s));
}

hvd_handle* hvd_reducescatter_async(const char* name, const void* sendbuf, hvd_dtype_t dtype,
                                    int ndim, const int64_t* shape, hvd_reduce_op_t op) {
  if (const std::string bad = BadShape(ndim, shape); !bad.empty())
    return Failed("the tensor " + bad);
  hvd::AllreduceOptions o;
  o.op = static_cast<hvd::ReduceOp>(op);
  return Wrap(
      hvd::ReducescatterAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape), o));
}

int hvd_barrier(void) {
  return Report(hvd::Barrier());
}
int hvd_join(int* last_joined_rank) {
  return Report(hvd::Join(last_joined_rank));
}

int hvd_abi_version(void) {
  return HVD_ABI_VERSION;
}

int hvd_init_with_process_sets(const int* ranks, const int* set_sizes, int num_sets, int dynamic) {
  hvd::InitOptions o;
  o.dynamic_process_sets = dynamic != 0;
  if (num_sets < 0 || (num_sets > 0 && (ranks == nullptr || set_sizes == nullptr))) {
    return Report(hvd::InvalidArgument(
        "hvd_init_with_process_sets: num_sets must be >= 0, with ranks and set_sizes given"));
  }
  size_t at = 0;
  for (int i = 0; i < num_sets; ++i) {
    if (set_sizes[i] < 0) {
      return Report(hvd::InvalidArgument("hvd_init_with_process_sets: set " + std::to_string(i) +
                                         " has a negative size"));
    }
    o.process_sets.emplace_back(ranks + at, ranks + at + set_sizes[i]);
    at += static_cast<size_t>(set_sizes[i]);
  }
  return Report(hvd::Init(o));
}

hvd_handle* hvd_enqueue_allreduce(const char* name, const hvd_tensor* input,
                                  const hvd_tensor* output, hvd_reduce_op_t op, double prescale,
                                  double postscale, int process_set) {
  return Wrap(StartAllreduce(name, input, output, op, prescale, postscale, process_set));
}

hvd_handle* hvd_run_allreduce(const char* name, const hvd_tensor* input, const hvd_tensor* output,
                              hvd_reduce_op_t op, double prescale, double postscale,
                              int process_set) {
  hvd::internal::CallerWaits waits;
  return hvd_enqueue_allreduce(name, input, output, op, prescale, postscale, process_set);
}

int hvd_run_allreduce_for(const char* name, const hvd_tensor* input, const hvd_tensor* output,
                          hvd_reduce_op_t op, double prescale, double postscale, int process_set,
                          int64_t timeout_ms, hvd_handle** pending) {
  if (pending != nullptr) *pending = nullptr;
  hvd::Handle h;  // on the heap only when it outlives the call (*pending)
  {
    // This thread runs the rounds for at most `timeout_ms` (a peer may be late): the caller then
    // gets its pending handle back in time to see a Ctrl-C.
    const auto wait = std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
    hvd::internal::CallerWaits waits(pending != nullptr
                                         ? std::chrono::steady_clock::now() + wait
                                         : std::chrono::steady_clock::time_point::max());
    h = StartAllreduce(name, input, output, op, prescale, postscale, process_set);
  }
  const hvd::Status waited = h.WaitFor(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
  // Whether it completed decides, not the wait's status: an operation may complete between the
  // wait's timeout and here, and its own status is then the answer.
  if (!h.Ready() && pending != nullptr) {
    *pending = Wrap(std::move(h));
    return Report(waited);
  }
  return Report(h.Wait());  // at once when complete; else (no `pending`) waits
}

hvd_handle* hvd_enqueue_grouped_allreduce(const char* name, int n, const hvd_tensor* inputs,
                                          const hvd_tensor* outputs, hvd_reduce_op_t op,
                                          double prescale, double postscale, int process_set) {
  if (n > 0 && (inputs == nullptr || outputs == nullptr)) {
    return Failed("grouped allreduce: inputs or outputs is NULL");
  }
  if (!BadShape(n, inputs).empty()) return Failed("grouped allreduce: " + BadShape(n, inputs));
  if (!BadShape(n, outputs).empty()) return Failed("grouped allreduce: " + BadShape(n, outputs));
  return Wrap(hvd::GroupedAllreduceAsync(NameOr(name), FromC(n, inputs), FromC(n, outputs),
                                         Reduce(op, prescale, postscale, process_set)));
}

hvd_handle* hvd_enqueue_allgather(const char* name, const hvd_tensor* input, int process_set) {
  if (input == nullptr) return Failed("allgather: input is NULL");
  if (!BadShape(1, input).empty()) return Failed("allgather: " + BadShape(1, input));
  return Wrap(hvd::AllgatherAsync(NameOr(name), FromC(input), {}, process_set));
}

hvd_handle* hvd_enqueue_grouped_allgather(const char* name, int n, const hvd_tensor* inputs,
                                          int process_set) {
  if (n > 0 && inputs == nullptr) return Failed("grouped allgather: inputs is NULL");
  if (!BadShape(n, inputs).empty()) return Failed("grouped allgather: " + BadShape(n, inputs));
  return Wrap(hvd::GroupedAllgatherAsync(NameOr(name), FromC(n, inputs), {}, process_set));
}

hvd_handle* hvd_enqueue_broadcast(const char* name, const hvd_tensor* tensor, int root,
                                  int process_set) {
  if (tensor == nullptr) return Failed("broadcast: tensor is NULL");
  if (!BadShape(1, tensor).empty()) return Failed("broadcast: " + BadShape(1, tensor));
  return Wrap(hvd::BroadcastAsync(NameOr(name), FromC(tensor), root, {}, process_set));
}

hvd_handle* hvd_enqueue_alltoall(const char* name, const hvd_tensor* input, const int64_t* splits,
                                 int nsplits, int process_set) {
  if (input == nullptr) return Failed("alltoall: input is NULL");
  if (!BadShape(1, input).empty()) return Failed("alltoall: " + BadShape(1, input));
  std::vector<int64_t> s;
  if (splits != nullptr) {
    if (nsplits < 0) return Failed("alltoall: nsplits is negative");
    s.assign(splits, splits + nsplits);
  }
  return Wrap(hvd::AlltoallAsync(NameOr(name), FromC(input), s, {}, process_set));
}

hvd_handle* hvd_enqueue_reducescatter(const char* name, const hvd_tensor* input, hvd_reduce_op_t op,
                                      double prescale, double postscale, int process_set) {
  if (input == nullptr) return Failed("reducescatter: input is NULL");
  if (!BadShape(1, input).empty()) return Failed("reducescatter: " + BadShape(1, input));
  return Wrap(hvd::ReducescatterAsync(NameOr(name), FromC(input),
                                      Reduce(op, prescale, postscale, process_set)));
}

hvd_handle* hvd_enqueue_grouped_reducescatter(const char* name, int n, const hvd_tensor* inputs,
                                              hvd_reduce_op_t op, double prescale, double postscale,
                                              int process_set) {
  if (n > 0 && inputs == nullptr) return Failed("grouped reducescatter: inputs is NULL");
  if (!BadShape(n, inputs).empty()) {
    return Failed("grouped reducescatter: " + BadShape(n, inputs));
  }
  return Wrap(hvd::GroupedReducescatterAsync(NameOr(name), FromC(n, inputs),
                                             Reduce(op, prescale, postscale, process_set)));
}

hvd_handle* hvd_enqueue_allgather_bytes(const char* name, const void* data, size_t n,
                                        int process_set) {
  if (const std::string bad = BadByteCount(n); !bad.empty()) return Failed("allgather: " + bad);
  return Wrap(hvd::AllgatherBytesAsync(NameOr(name), data, n, {}, process_set));
}

hvd_handle* hvd_enqueue_broadcast_bytes(const char* name, const void* data, size_t n, int root,
                                        int process_set) {
  if (const std::string bad = BadByteCount(n); !bad.empty()) return Failed("broadcast: " + bad);
  return Wrap(hvd::BroadcastBytesAsync(NameOr(name), data, n, root, {}, process_set));
}

hvd_handle* hvd_enqueue_barrier(int process_set) {
  return Wrap(hvd::BarrierAsync(process_set));
}
hvd_handle* hvd_enqueue_join(int process_set) {
  return Wrap(hvd::JoinAsync(process_set));
}
int hvd_handle_last_joined_rank(const hvd_handle* h) {
  return h ? h->handle.last_joined_rank() : -1;
}
int hvd_is_homogeneous(void) {
  return hvd::IsHomogeneous() ? 1 : 0;
}
int hvd_native_stack_dump_signal(void) {
  return hvd::runtime::stall::NativeStackDumpSignal();
}

int hvd_wait_for(hvd_handle* h, int64_t timeout_ms) {
  if (h == nullptr) return Report(hvd::InvalidArgument("hvd_wait_for: handle is NULL"));
  return Report(h->handle.WaitFor(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms)));
}

int hvd_handle_output_count(const hvd_handle* h) {
  return h ? static_cast<int>(h->handle.output_count()) : 0;
}

const void* hvd_handle_output_at(const hvd_handle* h, int i, size_t* bytes) {
  if (bytes) *bytes = h && i >= 0 ? h->handle.output_bytes(static_cast<size_t>(i)) : 0;
  return h && i >= 0 ? h->handle.output_data(static_cast<size_t>(i)) : nullptr;
}

int hvd_handle_output_device_at(const hvd_handle* h, int i) {
  return h && i >= 0 ? h->handle.output_device(static_cast<size_t>(i)) : -1;
}

hvd_handle* hvd_handle_share(const hvd_handle* h) {
  return h ? new (std::nothrow) hvd_handle{h->handle} : nullptr;
}

int hvd_handle_output_shape_at(const hvd_handle* h, int i, int64_t* dims, int max_dims) {
  if (h == nullptr || i < 0) return 0;
  const auto& shape = h->handle.output_shape(static_cast<size_t>(i));
  for (int d = 0; d < max_dims && d < static_cast<int>(shape.size()) && dims; ++d) {
    dims[d] = shape[d];
  }
  return static_cast<int>(shape.size());
}

int hvd_handle_output_splits(const hvd_handle* h, int i, int64_t* splits, int max) {
  if (h == nullptr || i < 0) return 0;
  const auto& v = h->handle.output_splits(static_cast<size_t>(i));
  for (int d = 0; d < max && d < static_cast<int>(v.size()) && splits; ++d) splits[d] = v[d];
  return static_cast<int>(v.size());
}

int hvd_poll(const hvd_handle* h) {
  return h == nullptr || h->handle.Ready() ? 1 : 0;
}

int hvd_wait(hvd_handle* h) {
  if (h == nullptr) return Report(hvd::InvalidArgument("hvd_wait: handle is NULL"));
  return Report(h->handle.Wait());
}

const void* hvd_handle_output(const hvd_handle* h, size_t* bytes) {
  if (bytes) *bytes = h ? h->handle.output_bytes() : 0;
  return h ? h->handle.output_data() : nullptr;
}

int hvd_handle_output_shape(const hvd_handle* h, int64_t* dims, int max_dims) {
  if (h == nullptr) return 0;
  const auto& shape = h->handle.output_shape();
  for (int i = 0; i < max_dims && i < static_cast<int>(shape.size()) && dims; ++i) {
    dims[i] = shape[i];
  }
  return static_cast<int>(shape.size());
}

void hvd_release(hvd_handle* h) {
  delete h;
}

}  // extern "C"
