// Adasum: adaptive summation of gradients (Maleki et al. 2020, "Scaling Distributed Training with
// Adaptive Summation"; Horovod's hvd.Adasum). Instead of a sum, two ranks' gradients are combined
// by a pairwise operator that adds what is orthogonal and averages what is parallel, and the
// operator is applied along a fixed binary tree over the ranks.
//
// Vocabulary (N ranks, this rank r):
//   tensor     - the buffer holds tensors back to back (tensor_counts elements each); Adasum is
//                applied per tensor (per layer, as Horovod does): each tensor gets its own dot
//                product and norms, hence its own coefficients.
//   operator   - adasum(a, b) for two versions a, b of one tensor, with dot = a.b, na = |a|^2,
//                nb = |b|^2 accumulated in double:
//                  acoeff = na >= 1e-8 ? 1 - dot / na * 0.5 : 1   (Horovod's guard)
//                  bcoeff = nb >= 1e-8 ? 1 - dot / nb * 0.5 : 1
//                  adasum(a, b) = acoeff * a + bcoeff * b
//                adasum(a, a) = a; a orthogonal to b gives a + b. Arithmetic: float64 and float32
//                combine in double and round once to the type; float16 and bfloat16 are widened
//                to float32 (reduce.h), combined in float32 with the coefficients rounded to
//                float, and rounded back to nearest even; dot products are always in double.
//   P          - the largest power of two <= N. The ranks r >= P are the extra ranks.
//   fold-in    - extra rank r sends its buffer to rank r - P, which replaces its own x_{r-P} with
//                adasum(x_{r-P}, x_r) (Horovod refuses N that is not a power of two; this step is
//                how we support it). Then only ranks 0 .. P-1 take part until the fold-out.
//   level l    - l = 0 .. log2(P) - 1, distance d = 2^l, partner r ^ d. Before level l rank r
//                holds its slice: elements [lo, hi) of the buffer (the whole buffer at level 0),
//                shared with its partner. With mid = lo + (hi - lo) / 2 (rounded down), the lower
//                rank of the pair (bit l of r clear) keeps [lo, mid), the upper keeps [mid, hi);
//                each sends the other its half (vector halving, distance doubling: VHDD).
//   group      - the 2d ranks that agree on every bit of r above bit l. At level l the group's
//                lower d ranks hold disjoint slices of one vector A (their adasum so far) and the
//                upper d ranks the same slices of B; after the exchange the group's 2d ranks hold
//                disjoint pieces of the buffer, each with both A and B on its piece.
//   scalars    - per tensor, (dot, na, nb) of the piece of that tensor within this rank's piece
//                (a = A, b = B: the lower half of the group is always the left operand), summed
//                over the group by recursive doubling (steps k = 0 .. l, partner r ^ 2^k,
//                lower + upper in that order, so every member ends with the same bits). Each rank
//                then writes adasum(A, B) on its piece, with the whole tensors' coefficients.
//   allgather  - levels in reverse, partners exchange the halves they kept (distance halving);
//                afterwards ranks 0 .. P-1 hold the whole result.
//   fold-out   - rank r - P sends the result to extra rank r.
// The reduction tree (what a test computes as the reference, per tensor):
//   y_i = adasum(x_i, x_{i+P}) for i < N - P;  y_i = x_i for N - P <= i < P;
//   then for d = 1, 2, .., P/2: y_g = adasum(y_g, y_{g+d}) for every g that is a multiple of 2d;
//   the result is y_0 on every rank.
// Every result element is computed by exactly one rank and copied to the others, so all ranks
// end with the same bytes. Against the tree evaluated in one place in exact arithmetic, the
// result differs only by rounding: dot products are summed in pieces (per rank, then over the
// group) and every level's result is rounded to the dtype.
// Cost per rank below P: about twice the buffer sent (halves of halves, then the same back in
// the allgather) in 2 log2(P) exchanges, plus log2(P) (log2(P) + 1) / 2 exchanges of 3 doubles
// per tensor; a rank with an extra partner also receives and sends the whole buffer once.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"

namespace hvd::runtime::collectives {
namespace {

// Horovod's threshold below which a norm is treated as zero (coefficient 1).
constexpr double kMinNormSq = 1e-8;

// The half slice received from the partner (or, in the fold-in, the extra rank's whole buffer).
// Kept per thread between calls, like the pipeline's scratch (pipeline.h): a training step that
// allocated and freed a fresh half-gradient-sized buffer would fault its pages in every time.
char* Scratch(size_t bytes) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t capacity = 0;
  if (capacity < bytes) {
    buf.reset(new char[bytes]);  // aligned for every element type (new's default alignment)
    capacity = bytes;
  }
  return buf.get();
}

struct F32 {
  using T = float;
  static double Widen(T x) { return x; }
};
struct F64 {
  using T = double;
  static double Widen(T x) { return x; }
};
struct F16 {
  using T = uint16_t;
  static float Widen(T x) { return HalfToFloat(x); }
  static T Narrow(float x) { return FloatToHalf(x); }
};
struct BF16 {
  using T = uint16_t;
  static float Widen(T x) { return BFloat16ToFloat(x); }
  static T Narrow(float x) { return FloatToBFloat16(x); }
};

// out += (a.b, |a|^2, |b|^2) over n elements. Four interleaved accumulators break the chain of
// dependent double additions; all three sums use the same order, so a == b gives dot == na == nb
// bit for bit (and adasum(a, a) exactly a).
template <typename K>
void Dots(const typename K::T* a, const typename K::T* b, size_t n, double* out) {
  double d[4] = {0, 0, 0, 0}, x[4] = {0, 0, 0, 0}, y[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double u = K::Widen(a[i + k]), v = K::Widen(b[i + k]);
      d[k] += u * v;
      x[k] += u * u;
      y[k] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double u = K::Widen(a[i]), v = K::Widen(b[i]);
    d[0] += u * v;
    x[0] += u * u;
    y[0] += v * v;
  }
  out[0] += (d[0] + d[1]) + (d[2] + d[3]);
  out[1] += (x[0] + x[1]) + (x[2] + x[3]);
  out[2] += (y[0] + y[1]) + (y[2] + y[3]);
}

// dst[i] = ca * a[i] + cb * b[i]; dst may be a or b (element by element, so aliasing is fine).
template <typename K>
void Combine(typename K::T* dst, const typename K::T* a, const typename K::T* b, size_t n,
             double ca, double cb) {
  if constexpr (sizeof(typename K::T) >= 4) {
    using T = typename K::T;
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(ca * a[i] + cb * b[i]);
  } else {
    const float fa = static_cast<float>(ca), fb = static_cast<float>(cb);
    for (size_t i = 0; i < n; ++i) dst[i] = K::Narrow(fa * K::Widen(a[i]) + fb * K::Widen(b[i]));
  }
}

template <typename F>
void Dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kFloat32:
      return f(F32{});
    case DataType::kFloat64:
      return f(F64{});
    case DataType::kFloat16:
      return f(F16{});
    case DataType::kBFloat16:
      return f(BF16{});
    default:
      return;  // refused by AdasumAllreduce before any work
  }
}

// The buffer's tensors and the arithmetic of one dtype over them.
struct Tensors {
  std::vector<size_t> off;  // tensors + 1 element offsets
  DataType dtype;
  size_t es;

  size_t count() const { return off.size() - 1; }

  // Calls f(t, begin, end) for every tensor t overlapping elements [begin, end), with the
  // overlap (non-empty).
  template <typename F>
  void ForEachPiece(size_t begin, size_t end, F&& f) const {
    if (begin >= end) return;
    // The first tensor ending after `begin` (empty tensors never overlap anything).
    size_t t = std::upper_bound(off.begin(), off.end(), begin) - off.begin() - 1;
    for (; t < count() && off[t] < end; ++t) {
      const size_t b = std::max(begin, off[t]), e = std::min(end, off[t + 1]);
      if (b < e) f(t, b, e);
    }
  }

  // scalars[3t..3t+2] += (a.b, |a|^2, |b|^2) over the elements [begin, end) of each tensor t they
  // overlap; a and b point at element `begin`.
  void AddScalars(const char* a, const char* b, size_t begin, size_t end, double* scalars) const {
    Dispatch(dtype, [&](auto k) {
      using K = decltype(k);
      using T = typename K::T;
      ForEachPiece(begin, end, [&](size_t t, size_t s, size_t e) {
        Dots<K>(reinterpret_cast<const T*>(a) + (s - begin),
                reinterpret_cast<const T*>(b) + (s - begin), e - s, scalars + 3 * t);
      });
    });
  }

  // dst = adasum(a, b) over elements [begin, end), each tensor with the coefficients of its
  // (whole-tensor) scalars. dst, a and b point at element `begin`; dst may be a or b.
  void Apply(char* dst, const char* a, const char* b, size_t begin, size_t end,
             const double* scalars) const {
    Dispatch(dtype, [&](auto k) {
      using K = decltype(k);
      using T = typename K::T;
      ForEachPiece(begin, end, [&](size_t t, size_t s, size_t e) {
        const double dot = scalars[3 * t], na = scalars[3 * t + 1], nb = scalars[3 * t + 2];
        const double ca = na >= kMinNormSq ? 1.0 - dot / na * 0.5 : 1.0;
        const double cb = nb >= kMinNormSq ? 1.0 - dot / nb * 0.5 : 1.0;
        const size_t i = s - begin;
        Combine<K>(reinterpret_cast<T*>(dst) + i, reinterpret_cast<const T*>(a) + i,
                   reinterpret_cast<const T*>(b) + i, e - s, ca, cb);
      });
    });
  }
};

bool IsAdasumType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// Sums `scalars` over the level-l group (see "scalars" above); `got` is scratch of the same size.
Status GroupSum(const Comm& comm, int level, int levels, std::vector<double>* scalars,
                std::vector<double>* got) {
  const int r = comm.rank();
  const size_t bytes = scalars->size() * sizeof(double);
  for (int k = 0; k <= level; ++k) {
    const int peer = r ^ (1 << k);
    Status s = transport::SendRecv(*comm.transport, peer, scalars->data(), bytes, peer, got->data(),
                                   bytes, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("adasum level " + std::to_string(level + 1) + "/" +
                           std::to_string(levels) + ", scalars step " + std::to_string(k + 1) +
                           "/" + std::to_string(level + 1) + ": exchange with " +
                           internal::PeerName(comm, peer, &s));
    }
    const bool upper = (r & (1 << k)) != 0;
    for (size_t i = 0; i < scalars->size(); ++i) {
      const double mine = (*scalars)[i], theirs = (*got)[i];
      (*scalars)[i] = upper ? theirs + mine : mine + theirs;
    }
  }
  return Status::OK();
}

}  // namespace

Status AdasumAllreduce(const Comm& comm, void* buf, const std::vector<size_t>& tensor_counts,
                       DataType dtype) {
  if (!IsAdasumType(dtype)) {
    return InvalidArgument(
        "Adasum needs floating-point tensors (float16, bfloat16, float32, float64); got " +
        std::string(DataTypeName(dtype)));
  }
  if (comm.transport == nullptr) return InvalidArgument("adasum: no transport");
  Tensors tensors;
  tensors.dtype = dtype;
  tensors.es = DataTypeSize(dtype);
  tensors.off.assign(tensor_counts.size() + 1, 0);
  for (size_t t = 0; t < tensor_counts.size(); ++t) {
    tensors.off[t + 1] = tensors.off[t] + tensor_counts[t];
  }
  const size_t total = tensors.off.back();
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1 || total == 0) return Status::OK();

  const size_t es = tensors.es;
  char* base = static_cast<char*>(buf);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  int levels = 0;
  while ((1 << levels) < p) ++levels;
  // Context for the fold-in/out errors, which only ranks r % P < N - P reach.
  auto fold = [&](const char* phase) {
    return std::string("adasum ") + phase + " (" + std::to_string(n) + " ranks: rank " +
           std::to_string(comm.JobRank(r % p)) + " folds in rank " +
           std::to_string(comm.JobRank(r % p + p)) + ")";
  };

  // Extra ranks: hand the buffer to rank r - P, get the result back from it.
  if (r >= p) {
    const int peer = r - p;
    Status s = transport::Send(*comm.transport, peer, base, total * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext(fold("fold-in") + ": send to " + internal::PeerName(comm, peer, &s));
    }
    s = transport::Recv(*comm.transport, peer, base, total * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext(fold("fold-out") + ": recv from " + internal::PeerName(comm, peer, &s));
    }
    return Status::OK();
  }

  const bool has_extra = r + p < n;
  // The fold-in receives a whole buffer; level 0 receives the larger half at most.
  char* scratch = Scratch(has_extra ? total * es : (total - total / 2) * es);
  std::vector<double> scalars(3 * tensors.count()), got(3 * tensors.count());

  if (has_extra) {
    const int peer = r + p;
    Status s = transport::Recv(*comm.transport, peer, scratch, total * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext(fold("fold-in") + ": recv from " + internal::PeerName(comm, peer, &s));
    }
    // The whole tensors are here, so their scalars need no communication.
    tensors.AddScalars(base, scratch, 0, total, scalars.data());
    tensors.Apply(base, base, scratch, 0, total, scalars.data());
  }

  // Reduce: vector halving, distance doubling. slices[l] is this rank's slice before level l.
  std::vector<std::pair<size_t, size_t>> slices;
  size_t lo = 0, hi = total;
  for (int l = 0; l < levels; ++l) {
    const int peer = r ^ (1 << l);
    const bool lower = (r & (1 << l)) == 0;
    const size_t mid = lo + (hi - lo) / 2;
    const size_t keep_lo = lower ? lo : mid, keep_hi = lower ? mid : hi;
    const size_t give_lo = lower ? mid : lo, give_hi = lower ? hi : mid;
    Status s =
        transport::SendRecv(*comm.transport, peer, base + give_lo * es, (give_hi - give_lo) * es,
                            peer, scratch, (keep_hi - keep_lo) * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("adasum level " + std::to_string(l + 1) + "/" + std::to_string(levels) +
                           " (distance " + std::to_string(1 << l) + "): exchange with " +
                           internal::PeerName(comm, peer, &s));
    }
    // The lower half of the group's vector is always the left operand.
    char* mine = base + keep_lo * es;
    const char* a = lower ? mine : scratch;
    const char* b = lower ? scratch : mine;
    std::fill(scalars.begin(), scalars.end(), 0.0);
    tensors.AddScalars(a, b, keep_lo, keep_hi, scalars.data());
    HVD_RETURN_IF_ERROR(GroupSum(comm, l, levels, &scalars, &got));
    tensors.Apply(mine, a, b, keep_lo, keep_hi, scalars.data());
    slices.push_back({lo, hi});
    lo = keep_lo;
    hi = keep_hi;
  }

  // Allgather: distance halving, each pair swaps the halves it kept, in place.
  for (int l = levels - 1; l >= 0; --l) {
    const int peer = r ^ (1 << l);
    const bool lower = (r & (1 << l)) == 0;
    const auto [slo, shi] = slices[l];
    const size_t mid = slo + (shi - slo) / 2;
    const size_t other_lo = lower ? mid : slo, other_hi = lower ? shi : mid;
    Status s =
        transport::SendRecv(*comm.transport, peer, base + lo * es, (hi - lo) * es, peer,
                            base + other_lo * es, (other_hi - other_lo) * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext("adasum allgather level " + std::to_string(l + 1) + "/" +
                           std::to_string(levels) + " (distance " + std::to_string(1 << l) +
                           "): exchange with " + internal::PeerName(comm, peer, &s));
    }
    lo = slo;
    hi = shi;
  }

  if (has_extra) {
    const int peer = r + p;
    Status s = transport::Send(*comm.transport, peer, base, total * es, comm.idle_timeout);
    if (!s.ok()) {
      return s.WithContext(fold("fold-out") + ": send to " + internal::PeerName(comm, peer, &s));
    }
  }
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
