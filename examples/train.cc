// A data-parallel training loop with hvd: a linear model y = w·x + b fitted by SGD on synthetic
// data, each rank training on its own shard. It uses the four lines that make a script
// data-parallel (Init, Broadcast of the initial parameters, Allreduce of gradients, Shutdown) and
// checks at the end that every rank holds identical parameters close to the true ones.
//
//   ./train [--steps N] [--features F] [--batch B]
//
// Run it under hvdrun (hvdrun -np 4 ./train), or alone as a single-process job.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

struct Args {
  int steps = 200;
  int features = 64;
  int batch = 256;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    int* target = flag == "--steps"      ? &a->steps
                  : flag == "--features" ? &a->features
                  : flag == "--batch"    ? &a->batch
                                         : nullptr;
    if (target == nullptr || i + 1 >= argc || (*target = std::atoi(argv[++i])) <= 0) {
      std::fprintf(stderr,
                   "train: bad argument '%s' (use --steps N --features F --batch B, all > 0)\n",
                   flag.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  hvd::Status s = hvd::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "train: %s\n", s.ToString().c_str());
    return 1;
  }
  const int rank = hvd::Rank(), size = hvd::Size();
  const int f = args.features;

  // The truth every rank's data comes from, and this rank's own shard of samples.
  std::mt19937 truth_rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(f);
  for (float& v : w_true) v = normal(truth_rng);
  const float b_true = 0.5f;
  std::mt19937 data_rng(1000 + rank);

  // Parameters: w followed by b. Ranks start from different random values; the broadcast makes
  // them identical, as in every data-parallel script.
  std::vector<float> params(f + 1);
  std::mt19937 init_rng(7 + rank);
  for (float& v : params) v = normal(init_rng);
  hvd::Tensor p = hvd::MakeTensor(params.data(), hvd::DataType::kFloat32, f + 1);
  s = hvd::Broadcast("params", p, 0);

  std::vector<float> x(static_cast<size_t>(args.batch) * f), y(args.batch);
  std::vector<float> grad_w(f), grad_b(1);
  float loss = 0;
  const float lr = 0.1f;
  for (int step = 0; s.ok() && step < args.steps; ++step) {
    for (int i = 0; i < args.batch; ++i) {
      float target = b_true;
      for (int j = 0; j < f; ++j) {
        x[i * f + j] = normal(data_rng);
        target += w_true[j] * x[i * f + j];
      }
      y[i] = target + 0.01f * normal(data_rng);
    }
    std::fill(grad_w.begin(), grad_w.end(), 0.0f);
    grad_b[0] = 0;
    loss = 0;
    for (int i = 0; i < args.batch; ++i) {
      float pred = params[f];
      for (int j = 0; j < f; ++j) pred += params[j] * x[i * f + j];
      const float err = pred - y[i];
      loss += err * err / args.batch;
      for (int j = 0; j < f; ++j) grad_w[j] += 2 * err * x[i * f + j] / args.batch;
      grad_b[0] += 2 * err / args.batch;
    }
    // Average the gradients across ranks: two tensors, negotiated and fused by hvd.
    hvd::Tensor gw = hvd::MakeTensor(grad_w.data(), hvd::DataType::kFloat32, f);
    hvd::Tensor gb = hvd::MakeTensor(grad_b.data(), hvd::DataType::kFloat32, 1);
    hvd::Handle hw = hvd::AllreduceAsync("grad.w", gw, gw);
    hvd::Handle hb = hvd::AllreduceAsync("grad.b", gb, gb);
    s = hw.Wait();
    if (s.ok()) s = hb.Wait();
    for (int j = 0; j < f; ++j) params[j] -= lr * grad_w[j];
    params[f] -= lr * grad_b[0];
    if (rank == 0 && (step % 50 == 0 || step == args.steps - 1)) {
      std::printf("step %d loss %.6f\n", step, loss);
      std::fflush(stdout);  // progress as it happens: under hvdrun stdout is a pipe
    }
  }

  // Every rank must hold the same parameters: compare with rank 0's via a max-allreduce of the
  // absolute difference.
  std::vector<float> reference(params);
  if (s.ok())
    s = hvd::Broadcast("check", hvd::MakeTensor(reference.data(), hvd::DataType::kFloat32, f + 1),
                       0);
  float drift = 0, error = std::fabs(params[f] - b_true);
  for (int j = 0; j < f; ++j) {
    drift = std::max(drift, std::fabs(params[j] - reference[j]));
    error = std::max(error, std::fabs(params[j] - w_true[j]));
  }
  hvd::Status end = hvd::Shutdown();
  if (!s.ok() || !end.ok()) {
    std::fprintf(stderr, "train: rank %d: %s\n", rank, (s.ok() ? end : s).ToString().c_str());
    return 1;
  }
  if (drift != 0 || error > 0.05f) {
    std::fprintf(stderr,
                 "train: rank %d: parameters differ from rank 0 by %g, from the truth by %g\n",
                 rank, drift, error);
    return 1;
  }
  if (rank == 0) {
    std::printf("trained on %d ranks: final loss %.6f, max parameter error %.4f\n", size, loss,
                error);
  }
  return 0;
}
