// The C ABI over the C++ API: opaque handles, integer status codes, thread-local error text.
#include "hvd/c_api.h"

#include <string>

#include "hvd/hvd.h"

struct hvd_handle {
  hvd::Handle handle;
};

namespace {

thread_local std::string t_last_error;

int Report(const hvd::Status& s) {
  t_last_error = s.ok() ? "" : s.ToString();
  return static_cast<int>(s.code());
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

}  // namespace

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
  return Wrap(hvd::AllreduceAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape),
                                  MakeTensor(recvbuf, dtype, ndim, shape), o));
}

hvd_handle* hvd_allgather_async(const char* name, const void* sendbuf, hvd_dtype_t dtype, int ndim,
                                const int64_t* shape) {
  return Wrap(hvd::AllgatherAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape)));
}

hvd_handle* hvd_broadcast_async(const char* name, void* buf, hvd_dtype_t dtype, int ndim,
                                const int64_t* shape, int root) {
  return Wrap(hvd::BroadcastAsync(name ? name : "", MakeTensor(buf, dtype, ndim, shape), root));
}

hvd_handle* hvd_alltoall_async(const char* name, const void* sendbuf, hvd_dtype_t dtype, int ndim,
                               const int64_t* shape, const int64_t* splits) {
  std::vector<int64_t> s;
  if (splits != nullptr && hvd::Size() > 0) s.assign(splits, splits + hvd::Size());
  return Wrap(hvd::AlltoallAsync(name ? name : "", MakeTensor(sendbuf, dtype, ndim, shape), s));
}

hvd_handle* hvd_reducescatter_async(const char* name, const void* sendbuf, hvd_dtype_t dtype,
                                    int ndim, const int64_t* shape, hvd_reduce_op_t op) {
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
  for (int i = 0; i < max_dims && i < static_cast<int>(shape.size()); ++i) dims[i] = shape[i];
  return static_cast<int>(shape.size());
}

void hvd_release(hvd_handle* h) {
  delete h;
}

}  // extern "C"
