#include "negotiation/message.h"

#include "base/wire.h"

namespace hvd::runtime::negotiation {

using base::Decoder;
using base::Encoder;

const char* OpTypeName(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
  }
  return "invalid";
}

const char* OpTypeActivity(OpType t) {
  switch (t) {
    case OpType::kAllreduce:
      return "ALLREDUCE";
    case OpType::kAllgather:
      return "ALLGATHER";
    case OpType::kBroadcast:
      return "BROADCAST";
    case OpType::kAlltoall:
      return "ALLTOALL";
    case OpType::kReducescatter:
      return "REDUCESCATTER";
    case OpType::kBarrier:
      return "BARRIER";
    case OpType::kJoin:
      return "JOIN";
    case OpType::kAddProcessSet:
      return "ADD_PROCESS_SET";
    case OpType::kRemoveProcessSet:
      return "REMOVE_PROCESS_SET";
  }
  return "INVALID";
}

int64_t TensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool BytesWithin(DataType dtype, int64_t rows, std::span<const int64_t> row_shape,
                 uint64_t* bytes) {
  *bytes = 0;
  // Each dimension alone first, zeros or not: [2^62, 0] is no shape anyone meant, and sums of
  // first dimensions over the ranks must not overflow.
  bool empty = rows == 0;
  if (static_cast<uint64_t>(rows) > kMaxTensorBytes) return false;
  for (int64_t d : row_shape) {
    if (static_cast<uint64_t>(d) > kMaxTensorBytes) return false;
    empty = empty || d == 0;
  }
  if (empty) return true;
  uint64_t n = DataTypeSize(dtype);
  for (int64_t d : row_shape) {
    if (static_cast<uint64_t>(d) > kMaxTensorBytes / n) return false;
    n *= static_cast<uint64_t>(d);
  }
  if (static_cast<uint64_t>(rows) > kMaxTensorBytes / n) return false;
  *bytes = n * static_cast<uint64_t>(rows);
  return true;
}

namespace {

constexpr uint8_t kRequestListTag = 0x51;
constexpr uint8_t kResponseListTag = 0x52;

void Put(Encoder& e, const TensorSpec& t) {
  e.Str(t.name);
  e.U8(static_cast<uint8_t>(t.dtype));
  e.I64Vec(t.shape);
}

bool Get(Decoder& d, TensorSpec* t) {
  uint8_t dtype = 0;
  bool ok = d.Str(&t->name) && d.U8(&dtype) && d.I64Vec(&t->shape);
  t->dtype = static_cast<DataType>(dtype);
  return ok && IsValid(t->dtype);
}

bool Get(Decoder& d, std::vector<TensorSpec>* v) {
  uint64_t n;
  if (!d.Count(&n, 17)) return false;
  v->resize(n);
  for (auto& t : *v) {
    if (!Get(d, &t)) return false;
  }
  return true;
}

void Put(Encoder& e, const std::vector<TensorSpec>& v) {
  e.U64(v.size());
  for (const auto& t : v) Put(e, t);
}

bool GetOp(Decoder& d, OpType* type, ReduceOp* op) {
  uint8_t t = 0, o = 0;
  if (!d.U8(&t) || !d.U8(&o)) return false;
  *type = static_cast<OpType>(t);
  *op = static_cast<ReduceOp>(o);
  return t <= static_cast<uint8_t>(OpType::kRemoveProcessSet) && IsValid(*op);
}

// The fields every Request and Response carry, in wire order.
template <typename T>
void PutCommon(Encoder& e, const T& r) {
  e.U8(static_cast<uint8_t>(r.type));
  e.U8(static_cast<uint8_t>(r.reduce_op));
  e.Str(r.key);
  Put(e, r.tensors);
  e.F64(r.prescale);
  e.F64(r.postscale);
  e.I32(r.root);
  e.U8((r.sized_by_root ? 1 : 0) | (r.gpu ? 2 : 0));
  e.I64Vec(r.splits);
}

template <typename T>
bool GetCommon(Decoder& d, T* r) {
  uint8_t flags = 0;
  const bool ok = GetOp(d, &r->type, &r->reduce_op) && d.Str(&r->key) && Get(d, &r->tensors) &&
                  d.F64(&r->prescale) && d.F64(&r->postscale) && d.I32(&r->root) && d.U8(&flags) &&
                  d.I64Vec(&r->splits);
  r->sized_by_root = (flags & 1) != 0;
  r->gpu = (flags & 2) != 0;
  return ok && flags <= 3;
}

}  // namespace

std::string Encode(const RequestList& list) {
  Encoder e;
  e.U8(kRequestListTag);
  e.I32(list.rank);
  e.U64(list.requests.size());
  for (const Request& r : list.requests) {
    e.I32(r.rank);
    PutCommon(e, r);
    e.I64(r.age_ms);
  }
  return e.Release();
}

Status Decode(const std::string& data, RequestList* list) {
  Decoder d(data);
  uint8_t tag = 0;
  uint64_t n = 0;
  if (d.U8(&tag) && tag == kRequestListTag && d.I32(&list->rank) && d.Count(&n, 40)) {
    list->requests.resize(n);
    for (Request& r : list->requests) {
      if (!(d.I32(&r.rank) && GetCommon(d, &r) && d.I64(&r.age_ms))) {
        break;
      }
    }
  }
  if (d.ok() && (tag != kRequestListTag || !d.done())) {
    return Internal("malformed request list: bad tag or trailing bytes");
  }
  return d.status("request list");
}

std::string Encode(const ResponseList& list) {
  Encoder e;
  e.U8(kResponseListTag);
  e.U64(list.responses.size());
  for (const Response& r : list.responses) {
    PutCommon(e, r);
    e.I64Vec(r.first_dims);
    e.I32(r.last_joined_rank);
    e.I32(r.contributors);
    e.Str(r.error);
    if (!r.error.empty()) e.I64Vec(r.stalled_ranks);  // nothing more for a key that runs
  }
  std::vector<int64_t> joined(list.joined_ranks.begin(), list.joined_ranks.end());
  e.I64Vec(joined);
  return e.Release();
}

Status Decode(const std::string& data, ResponseList* list) {
  Decoder d(data);
  uint8_t tag = 0;
  uint64_t n = 0;
  if (d.U8(&tag) && tag == kResponseListTag && d.Count(&n, 40)) {
    list->responses.resize(n);
    for (Response& r : list->responses) {
      if (!(GetCommon(d, &r) && d.I64Vec(&r.first_dims) && d.I32(&r.last_joined_rank) &&
            d.I32(&r.contributors) && d.Str(&r.error) &&
            (r.error.empty() || d.I64Vec(&r.stalled_ranks)))) {
        break;
      }
    }
    std::vector<int64_t> joined;
    if (d.I64Vec(&joined)) list->joined_ranks.assign(joined.begin(), joined.end());
  }
  if (d.ok() && (tag != kResponseListTag || !d.done())) {
    return Internal("malformed response list: bad tag or trailing bytes");
  }
  return d.status("response list");
}

}  // namespace hvd::runtime::negotiation
