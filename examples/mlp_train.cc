// Data-parallel training of a small multi-layer perceptron with hvd, in plain C++.
//
//   32 inputs -> H hidden (ReLU) -> H hidden (ReLU) -> 10 classes (softmax, cross-entropy)
//
// The data set is synthetic and the same on every host: 10 Gaussian class centroids in 32
// dimensions, drawn from a fixed seed, and samples that are a centroid plus Gaussian noise. Sample
// i of the training stream is generated from (seed, i) alone, so rank r's shard (samples
// r*N .. r*N+N-1) is disjoint from every other rank's without any rank generating the others'. A
// held-out test set, drawn from its own stream, is identical on every rank.
//
// What makes it data-parallel (the hvd calls are marked "hvd:"):
//   - Init, then Broadcast of rank 0's initial parameters (each rank initialises differently);
//   - per step, every gradient tensor (weight and bias of each of the 3 layers: 6 tensors) is
//     averaged with AllreduceAsync under its own name as soon as backprop produces it, in reverse
//     layer order, so hvd negotiates and fuses them while the next layer's gradients are computed;
//     the step then waits for all 6 and applies SGD with momentum;
//   - per epoch, the mean training loss is averaged across ranks for rank 0 to print;
//   - at the end every rank compares its parameters bit for bit with rank 0's (broadcast).
//
//   ./mlp_train [--epochs N] [--batch B] [--lr LR] [--momentum M] [--samples-per-rank N]
//               [--hidden H]
//
// Run it under hvdrun (hvdrun -np 4 ./mlp_train), or alone as a single-process job.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

constexpr int kInputs = 32;
constexpr int kClasses = 10;
constexpr int kTestSamples = 2000;
constexpr uint64_t kDataSeed = 20240601;  // centroids and samples: the same on every rank
constexpr float kCentroidScale = 1.0f;    // centroid coordinates ~ N(0, 1)
constexpr float kNoise = 1.4f;            // sample = centroid + N(0, kNoise^2) per coordinate

struct Args {
  int epochs = 10;
  int batch = 32;  // per rank; the global batch is batch * Size()
  double lr = 0.05;
  double momentum = 0.9;
  int samples_per_rank = 2048;
  int hidden = 64;
};

void Usage(FILE* out) {
  std::fprintf(
      out,
      "usage: mlp_train [--epochs N] [--batch B] [--lr LR] [--momentum M]\n"
      "                 [--samples-per-rank N] [--hidden H]\n"
      "  --epochs N            passes over each rank's shard (default 10)\n"
      "  --batch B             samples per rank per step, <= samples-per-rank (default 32)\n"
      "  --lr LR               SGD learning rate, > 0 (default 0.05)\n"
      "  --momentum M          SGD momentum, in [0, 1) (default 0.9)\n"
      "  --samples-per-rank N  training samples in each rank's shard (default 2048)\n"
      "  --hidden H            width of both hidden layers, 1..4096 (default 64)\n");
}

bool ParseInt(const char* s, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

bool ParseDouble(const char* s, double lo, double hi, bool hi_inclusive, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !std::isfinite(v) || v < lo ||
      (hi_inclusive ? v > hi : v >= hi))
    return false;
  *out = v;
  return true;
}

// Returns 0 to go on, 1 for --help (exit 0), 2 for a bad command line (message printed).
int ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      Usage(stdout);
      return 1;
    }
    const bool known = flag == "--epochs" || flag == "--batch" || flag == "--lr" ||
                       flag == "--momentum" || flag == "--samples-per-rank" || flag == "--hidden";
    if (!known) {
      std::fprintf(stderr, "mlp_train: unknown flag '%s'\n", flag.c_str());
      Usage(stderr);
      return 2;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "mlp_train: %s needs a value\n", flag.c_str());
      Usage(stderr);
      return 2;
    }
    const char* v = argv[++i];
    bool ok = flag == "--epochs"             ? ParseInt(v, 1, 100000, &a->epochs)
              : flag == "--batch"            ? ParseInt(v, 1, 1 << 20, &a->batch)
              : flag == "--lr"               ? ParseDouble(v, 1e-12, 100, true, &a->lr)
              : flag == "--momentum"         ? ParseDouble(v, 0, 1, false, &a->momentum)
              : flag == "--samples-per-rank" ? ParseInt(v, 1, 1 << 24, &a->samples_per_rank)
                                             : ParseInt(v, 1, 4096, &a->hidden);
    if (!ok) {
      std::fprintf(stderr, "mlp_train: bad value '%s' for %s\n", v, flag.c_str());
      Usage(stderr);
      return 2;
    }
  }
  if (a->batch > a->samples_per_rank) {
    std::fprintf(stderr, "mlp_train: --batch %d is larger than --samples-per-rank %d\n", a->batch,
                 a->samples_per_rank);
    return 2;
  }
  return 0;
}

// ---- Deterministic random numbers ------------------------------------------------------------
// SplitMix64 with Box-Muller: tiny, seedable per sample, and the same on every platform (unlike
// std::normal_distribution), so every rank agrees on the data set.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  Rng(uint64_t seed, uint64_t stream, uint64_t index)
      : state_(Mix(Mix(seed ^ (stream * 0x9e3779b97f4a7c15ull)) + index)) {}

  uint64_t Next() { return Mix(state_ += 0x9e3779b97f4a7c15ull); }
  double Uniform() { return (Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float Normal() {
    double u1 = Uniform(), u2 = Uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                              std::cos(2.0 * std::numbers::pi * u2));
  }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t state_;
};

// ---- The data set ----------------------------------------------------------------------------

struct Dataset {
  std::vector<float> x;  // [n, kInputs]
  std::vector<int> y;    // [n]
  int size() const { return static_cast<int>(y.size()); }
};

std::vector<float> MakeCentroids() {
  Rng rng(kDataSeed, /*stream=*/0, 0);
  std::vector<float> c(kClasses * kInputs);
  for (float& v : c) v = kCentroidScale * rng.Normal();
  return c;
}

// Samples first .. first+count-1 of one stream (1: training, 2: test).
Dataset MakeSamples(const std::vector<float>& centroids, uint64_t stream, int64_t first,
                    int count) {
  Dataset d;
  d.x.resize(static_cast<size_t>(count) * kInputs);
  d.y.resize(count);
  for (int i = 0; i < count; ++i) {
    Rng rng(kDataSeed, stream, static_cast<uint64_t>(first + i));
    const int label = static_cast<int>(rng.Below(kClasses));
    d.y[i] = label;
    for (int j = 0; j < kInputs; ++j)
      d.x[static_cast<size_t>(i) * kInputs + j] =
          centroids[label * kInputs + j] + kNoise * rng.Normal();
  }
  return d;
}

// ---- The model -------------------------------------------------------------------------------
// All parameters live in one buffer (so the final check is one broadcast); each layer's weight
// [out, in] and bias [out] are views into it, and the gradients mirror the same layout.

struct Layer {
  int in = 0, out = 0;
  size_t w = 0, b = 0;  // offsets of the weight and the bias in the parameter buffer
};

struct Model {
  std::vector<Layer> layers;
  std::vector<float> params;

  explicit Model(const std::vector<int>& widths) {
    size_t offset = 0;
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      Layer layer{widths[l], widths[l + 1], offset, 0};
      offset += static_cast<size_t>(layer.in) * layer.out;
      layer.b = offset;
      offset += layer.out;
      layers.push_back(layer);
    }
    params.assign(offset, 0.0f);
  }
  float* W(int l) { return params.data() + layers[l].w; }
  float* B(int l) { return params.data() + layers[l].b; }
  const float* W(int l) const { return params.data() + layers[l].w; }
  const float* B(int l) const { return params.data() + layers[l].b; }
};

// He initialisation for the ReLU layers, biases zero.
void InitParams(Model* m, Rng* rng) {
  for (size_t l = 0; l < m->layers.size(); ++l) {
    const Layer& L = m->layers[l];
    const float scale = std::sqrt(2.0f / static_cast<float>(L.in));
    for (int k = 0; k < L.in * L.out; ++k) m->W(l)[k] = scale * rng->Normal();
    std::fill(m->B(l), m->B(l) + L.out, 0.0f);
  }
}

// y[n, out] = x[n, in] * W^T + b
void LinearForward(const float* x, int n, const Layer& L, const float* W, const float* b,
                   float* y) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * L.in;
    float* yi = y + static_cast<size_t>(i) * L.out;
    for (int o = 0; o < L.out; ++o) {
      const float* wo = W + static_cast<size_t>(o) * L.in;
      float acc = b[o];
      for (int k = 0; k < L.in; ++k) acc += wo[k] * xi[k];
      yi[o] = acc;
    }
  }
}

// Given dy[n, out]: dW = dy^T x, db = sum_i dy_i, and (when dx is not null) dx = dy W.
void LinearBackward(const float* x, const float* dy, int n, const Layer& L, const float* W,
                    float* dW, float* db, float* dx) {
  std::fill(dW, dW + static_cast<size_t>(L.in) * L.out, 0.0f);
  std::fill(db, db + L.out, 0.0f);
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * L.in;
    const float* dyi = dy + static_cast<size_t>(i) * L.out;
    for (int o = 0; o < L.out; ++o) {
      float* dwo = dW + static_cast<size_t>(o) * L.in;
      for (int k = 0; k < L.in; ++k) dwo[k] += dyi[o] * xi[k];
      db[o] += dyi[o];
    }
  }
  if (dx == nullptr) return;
  for (int i = 0; i < n; ++i) {
    const float* dyi = dy + static_cast<size_t>(i) * L.out;
    float* dxi = dx + static_cast<size_t>(i) * L.in;
    std::fill(dxi, dxi + L.in, 0.0f);
    for (int o = 0; o < L.out; ++o) {
      const float* wo = W + static_cast<size_t>(o) * L.in;
      for (int k = 0; k < L.in; ++k) dxi[k] += dyi[o] * wo[k];
    }
  }
}

// Activations of one forward pass, kept for the backward pass.
struct Activations {
  std::vector<std::vector<float>> a;  // a[0] = input, a[l+1] = output of layer l (post-ReLU)
  std::vector<float> probs;           // softmax of the last layer's output
};

void Forward(const Model& m, const float* x, int n, Activations* act) {
  const size_t L = m.layers.size();
  act->a.resize(L + 1);
  act->a[0].assign(x, x + static_cast<size_t>(n) * kInputs);
  for (size_t l = 0; l < L; ++l) {
    const Layer& layer = m.layers[l];
    act->a[l + 1].resize(static_cast<size_t>(n) * layer.out);
    LinearForward(act->a[l].data(), n, layer, m.W(l), m.B(l), act->a[l + 1].data());
    if (l + 1 < L)
      for (float& v : act->a[l + 1]) v = std::max(v, 0.0f);  // ReLU
  }
  // Softmax over the logits, shifted by the row maximum for stability.
  act->probs = act->a[L];
  for (int i = 0; i < n; ++i) {
    float* p = act->probs.data() + static_cast<size_t>(i) * kClasses;
    const float mx = *std::max_element(p, p + kClasses);
    float sum = 0;
    for (int c = 0; c < kClasses; ++c) sum += (p[c] = std::exp(p[c] - mx));
    for (int c = 0; c < kClasses; ++c) p[c] /= sum;
  }
}

float MeanCrossEntropy(const Activations& act, const int* y, int n) {
  double loss = 0;
  for (int i = 0; i < n; ++i)
    loss -= std::log(std::max(act.probs[static_cast<size_t>(i) * kClasses + y[i]], 1e-30f));
  return static_cast<float>(loss / n);
}

double Accuracy(const Model& m, const Dataset& d) {
  Activations act;
  Forward(m, d.x.data(), d.size(), &act);
  int correct = 0;
  for (int i = 0; i < d.size(); ++i) {
    const float* p = act.probs.data() + static_cast<size_t>(i) * kClasses;
    correct += (std::max_element(p, p + kClasses) - p) == d.y[i];
  }
  return static_cast<double>(correct) / d.size();
}

hvd::Tensor View(float* data, std::vector<int64_t> shape) {
  return hvd::Tensor{data, hvd::DataType::kFloat32, std::move(shape)};
}

int Fail(int rank, const char* what, const hvd::Status& s) {
  std::fprintf(stderr, "mlp_train: rank %d: %s: %s\n", rank, what, s.ToString().c_str());
  hvd::Shutdown();
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (int rc = ParseArgs(argc, argv, &args); rc != 0) return rc == 1 ? 0 : 2;

  hvd::Status s = hvd::Init();  // hvd: meet the other ranks (or run alone without HVD_SIZE)
  if (!s.ok()) {
    std::fprintf(stderr, "mlp_train: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvd::Rank(), size = hvd::Size();

  // Data: this rank's shard of the training stream, and the shared test set.
  const std::vector<float> centroids = MakeCentroids();
  const Dataset train =
      MakeSamples(centroids, /*stream=*/1, static_cast<int64_t>(rank) * args.samples_per_rank,
                  args.samples_per_rank);
  const Dataset test = MakeSamples(centroids, /*stream=*/2, 0, kTestSamples);

  // Model: each rank initialises from its own seed; the broadcast gives everyone rank 0's values.
  Model model({kInputs, args.hidden, args.hidden, kClasses});
  const int num_layers = static_cast<int>(model.layers.size());
  Rng init_rng(7 + rank);
  InitParams(&model, &init_rng);
  {
    std::vector<hvd::Handle> handles;
    for (int l = 0; l < num_layers; ++l) {
      const Layer& L = model.layers[l];
      const std::string fc = "param.fc" + std::to_string(l + 1);
      handles.push_back(hvd::BroadcastAsync(fc + ".weight", View(model.W(l), {L.out, L.in}), 0));
      handles.push_back(hvd::BroadcastAsync(fc + ".bias", View(model.B(l), {L.out}), 0));
    }
    for (const hvd::Handle& h : handles)
      if (s.ok()) s = h.Wait();  // hvd: start from identical parameters
    if (!s.ok()) return Fail(rank, "broadcasting the initial parameters", s);
  }

  Model grads = model;     // same layout: gradients
  Model velocity = model;  // same layout: momentum buffers
  std::fill(velocity.params.begin(), velocity.params.end(), 0.0f);

  std::vector<int> order(train.size());
  std::iota(order.begin(), order.end(), 0);
  Rng shuffle_rng(kDataSeed + 1000 + rank);
  const int steps_per_epoch = train.size() / args.batch;  // the same on every rank
  std::vector<float> xb(static_cast<size_t>(args.batch) * kInputs);
  std::vector<int> yb(args.batch);
  Activations act;
  // delta[l + 1]: d loss / d (output of layer l), for l = L-1 .. 0.
  std::vector<std::vector<float>> delta(num_layers + 1);
  double test_accuracy = 0;

  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    for (int i = train.size() - 1; i > 0; --i)  // Fisher-Yates: this rank's order for the epoch
      std::swap(order[i], order[shuffle_rng.Below(static_cast<uint64_t>(i) + 1)]);
    double epoch_loss = 0;

    for (int step = 0; step < steps_per_epoch; ++step) {
      const int n = args.batch;
      for (int i = 0; i < n; ++i) {
        const int idx = order[step * n + i];
        std::copy_n(train.x.data() + static_cast<size_t>(idx) * kInputs, kInputs,
                    xb.data() + static_cast<size_t>(i) * kInputs);
        yb[i] = train.y[idx];
      }

      // Forward.
      Forward(model, xb.data(), n, &act);
      epoch_loss += MeanCrossEntropy(act, yb.data(), n);

      // Backward, last layer first. d(mean CE)/d logits = (softmax - onehot) / n.
      delta[num_layers] = act.probs;
      for (int i = 0; i < n; ++i) delta[num_layers][static_cast<size_t>(i) * kClasses + yb[i]] -= 1;
      for (float& v : delta[num_layers]) v /= static_cast<float>(n);

      std::vector<hvd::Handle> handles;
      for (int l = num_layers - 1; l >= 0; --l) {
        const Layer& L = model.layers[l];
        float* dx = nullptr;
        if (l > 0) {
          delta[l].resize(static_cast<size_t>(n) * L.in);
          dx = delta[l].data();
        }
        LinearBackward(act.a[l].data(), delta[l + 1].data(), n, L, model.W(l), grads.W(l),
                       grads.B(l), dx);
        // hvd: average this layer's gradients across ranks while the layers below are computed.
        const std::string fc = "grad.fc" + std::to_string(l + 1);
        const hvd::Tensor gw = View(grads.W(l), {L.out, L.in});
        const hvd::Tensor gb = View(grads.B(l), {L.out});
        handles.push_back(hvd::AllreduceAsync(fc + ".weight", gw, gw));
        handles.push_back(hvd::AllreduceAsync(fc + ".bias", gb, gb));
        if (l > 0)  // back through the ReLU: a[l] > 0 where it passed
          for (size_t k = 0; k < delta[l].size(); ++k)
            if (act.a[l][k] <= 0) delta[l][k] = 0;
      }
      for (const hvd::Handle& h : handles)
        if (s.ok()) s = h.Wait();
      if (!s.ok()) return Fail(rank, "averaging the gradients", s);

      // SGD with momentum on the averaged gradients: identical on every rank.
      const float lr = static_cast<float>(args.lr), mu = static_cast<float>(args.momentum);
      for (size_t k = 0; k < model.params.size(); ++k) {
        velocity.params[k] = mu * velocity.params[k] + grads.params[k];
        model.params[k] -= lr * velocity.params[k];
      }
    }

    // hvd: the mean training loss over every rank's shard.
    double mean_loss = epoch_loss / steps_per_epoch;
    s = hvd::Allreduce("loss.epoch", hvd::MakeTensor(&mean_loss, hvd::DataType::kFloat64, 1),
                       hvd::MakeTensor(&mean_loss, hvd::DataType::kFloat64, 1));
    if (!s.ok()) return Fail(rank, "averaging the loss", s);
    test_accuracy = Accuracy(model, test);
    if (rank == 0) {
      std::printf("epoch %d  train loss %.4f  test accuracy %.4f\n", epoch, mean_loss,
                  test_accuracy);
      std::fflush(stdout);
    }
  }

  // Every rank must hold exactly rank 0's parameters: compare bit for bit with a broadcast copy,
  // then agree (max-allreduce) on the worst difference, and on the highest rank that has one, so
  // rank 0 reports for everyone.
  std::vector<float> reference = model.params;
  s = hvd::Broadcast("check.params",
                     hvd::MakeTensor(reference.data(), hvd::DataType::kFloat32,
                                     static_cast<int64_t>(reference.size())),
                     0);
  if (!s.ok()) return Fail(rank, "broadcasting rank 0's parameters", s);
  double max_diff = 0, mismatches = 0;
  for (size_t k = 0; k < reference.size(); ++k) {
    if (std::memcmp(&reference[k], &model.params[k], sizeof(float)) != 0) {
      ++mismatches;
      const double d = std::fabs(static_cast<double>(reference[k]) - model.params[k]);
      max_diff = std::max(max_diff, std::isnan(d) ? INFINITY : d);
    }
  }
  double worst[3] = {mismatches, max_diff, mismatches != 0 ? static_cast<double>(rank) : -1.0};
  hvd::AllreduceOptions max_op;
  max_op.op = hvd::ReduceOp::kMax;
  s = hvd::Allreduce("check.worst", hvd::MakeTensor(worst, hvd::DataType::kFloat64, 3),
                     hvd::MakeTensor(worst, hvd::DataType::kFloat64, 3), max_op);
  if (!s.ok()) return Fail(rank, "comparing the parameters", s);
  hvd::Status end = hvd::Shutdown();
  if (!end.ok()) {
    std::fprintf(stderr, "mlp_train: rank %d: %s\n", rank, end.ToString().c_str());
    return 1;
  }
  if (mismatches != 0) {
    std::fprintf(stderr,
                 "mlp_train: rank %d: weights differ from rank 0's: %.0f of %zu values, max "
                 "difference %g\n",
                 rank, mismatches, reference.size(), max_diff);
    return 1;
  }
  if (worst[0] != 0) {  // this rank matches, another does not (it fails, naming itself)
    if (rank != 0) return 0;
    std::fprintf(stderr,
                 "mlp_train: weights on rank %.0f (the highest such rank) differ from rank 0's "
                 "(max difference over all ranks %g)\n",
                 worst[2], worst[1]);
    return 1;
  }
  if (rank == 0) {
    std::printf("mlp_train: %d rank%s, final test accuracy %.4f, weights identical on every rank\n",
                size, size == 1 ? "" : "s", test_accuracy);
  }
  return 0;
}
