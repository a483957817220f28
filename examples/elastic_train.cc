// Elastic training in C++ (docs/elastic.md): the loop hvd.elastic.run gives Python, by hand. A
// linear model y = w·x + b fitted by SGD as in train.cc; its state (parameters and step) is
// committed every few steps. When a collective fails because a worker left, the state goes back
// to the last commit, hvd re-forms with the workers that are left (Shutdown, then Init joins the
// launcher's new membership: new rank, new size), and rank 0's state is broadcast. At a commit,
// a newer membership (workers joined) re-forms the job without going back.
//
//   hvdrun -np 4 --min-np 2 ./elastic_train [--steps N] [--commit-every K]
//          [--die-worker ID --die-at-step S]      (that worker kills itself with SIGKILL)
//
// At the end every rank checks that all hold identical parameters close to the true ones, and
// prints its worker id, rank and size.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "hvd/hvd.h"

namespace {

constexpr int kFeatures = 16;
constexpr int kBatch = 32;

struct Args {
  int steps = 200;
  int commit_every = 5;
  int die_worker = -1;
  int die_at_step = -1;
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int* target = flag == "--steps"          ? &a->steps
                  : flag == "--commit-every" ? &a->commit_every
                  : flag == "--die-worker"   ? &a->die_worker
                  : flag == "--die-at-step"  ? &a->die_at_step
                                             : nullptr;
    if (target == nullptr || i + 1 >= argc) {
      std::fprintf(stderr, "elastic_train: bad argument '%s'\n", flag.c_str());
      return false;
    }
    *target = std::atoi(argv[++i]);
  }
  return a->steps > 0 && a->commit_every > 0;
}

// What survives a failure: the parameters (w, then b) and the step, as floats so that one
// broadcast carries both.
struct State {
  std::vector<float> values = std::vector<float>(kFeatures + 2, 0.0f);  // ..., b, step
  float& step() { return values.back(); }
};

// Rank 0's state to every rank (after a re-form: new workers have none, survivors agree).
hvd::Status Sync(State* s) {
  return hvd::Broadcast("state",
                        hvd::MakeTensor(s->values.data(), hvd::DataType::kFloat32,
                                        static_cast<int64_t>(s->values.size())),
                        0);
}

// Whether the launcher published a newer membership than this session's, as rank 0 sees it:
// every rank must re-form at the same step, so they take rank 0's answer.
hvd::Status HostsUpdated(bool* updated) {
  hvd::ElasticGenerationInfo g;
  HVD_RETURN_IF_ERROR(hvd::ElasticGeneration(&g));
  float flag = g.latest > g.joined ? 1.0f : 0.0f;
  HVD_RETURN_IF_ERROR(
      hvd::Broadcast("hosts_updated", hvd::MakeTensor(&flag, hvd::DataType::kFloat32, 1), 0));
  *updated = flag != 0;
  return hvd::Status::OK();
}

hvd::Status Reform(const char* why) {
  std::printf("rank %d re-forms: %s\n", hvd::Rank(), why);
  std::fflush(stdout);
  (void)hvd::Shutdown();  // does not wait for a peer that died
  return hvd::Init();     // the newest membership that names this worker
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  const char* id_env = std::getenv("HVD_WORKER_ID");
  const int worker = id_env != nullptr ? std::atoi(id_env) : -1;
  hvd::Status s = hvd::Init();
  if (!s.ok()) {
    std::fprintf(stderr, "elastic_train: %s\n", s.ToString().c_str());
    return 1;
  }
  std::mt19937 truth_rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w_true(kFeatures);
  for (float& v : w_true) v = normal(truth_rng);
  const float b_true = 0.5f;
  std::mt19937 data_rng(1000 + std::max(worker, 0));

  State state, committed;
  bool need_sync = true;
  std::vector<float> x(kFeatures), grad(kFeatures + 1);
  while (static_cast<int>(state.step()) < args.steps) {
    if (need_sync) {
      s = Sync(&state);
      if (s.ok()) committed = state;
      need_sync = false;
    }
    const int step = static_cast<int>(state.step());
    if (s.ok() && worker == args.die_worker && step == args.die_at_step) {
      std::printf("worker %d dies at step %d\n", worker, step);
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    if (s.ok()) {  // a batch of this rank's samples: the gradient of the squared error
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (int i = 0; i < kBatch; ++i) {
        float target = b_true, pred = state.values[kFeatures];
        for (int j = 0; j < kFeatures; ++j) {
          x[j] = normal(data_rng);
          target += w_true[j] * x[j];
          pred += state.values[j] * x[j];
        }
        const float err = pred - target;
        for (int j = 0; j < kFeatures; ++j) grad[j] += 2 * err * x[j] / kBatch;
        grad[kFeatures] += 2 * err / kBatch;
      }
      // Averaged over the ranks of this membership, whatever their number.
      const hvd::Tensor g = hvd::MakeTensor(grad.data(), hvd::DataType::kFloat32, kFeatures + 1);
      s = hvd::Allreduce("grad", g, g);
    }
    if (s.ok()) {
      for (int j = 0; j <= kFeatures; ++j) state.values[j] -= 0.1f * grad[j];
      state.step() += 1;
      if (static_cast<int>(state.step()) % args.commit_every == 0) {
        committed = state;  // commit
        // The launcher may now count this worker as holding the state (a shrink waits for it).
        s = hvd::ElasticCommitted();
        bool updated = false;
        if (s.ok()) s = HostsUpdated(&updated);
        if (s.ok() && updated) {
          s = Reform("workers joined");
          need_sync = true;  // the new workers get the state; nothing goes back
          if (!s.ok()) break;
          continue;
        }
      }
    }
    if (!s.ok()) {
      if (!hvd::IsElastic()) break;  // a fixed job cannot re-form
      // A peer left (Aborted or Unavailable): back to the last commit, re-form, sync.
      state = committed;
      s = Reform(s.ToString().substr(0, 160).c_str());
      if (!s.ok()) break;
      need_sync = true;
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "elastic_train: worker %d: %s\n", worker, s.ToString().c_str());
    return 1;
  }
  // Every rank holds rank 0's parameters, and they are near the truth.
  State reference = state;
  s = Sync(&reference);
  float drift = 0, error = std::fabs(state.values[kFeatures] - b_true);
  for (int j = 0; j < kFeatures; ++j) {
    drift = std::max(drift, std::fabs(state.values[j] - reference.values[j]));
    error = std::max(error, std::fabs(state.values[j] - w_true[j]));
  }
  std::printf("worker %d final: rank %d/%d step %d drift %g error %.4f\n", worker, hvd::Rank(),
              hvd::Size(), static_cast<int>(state.step()), drift, error);
  (void)hvd::Shutdown();
  if (!s.ok() || drift != 0 || !(error < 0.1f)) {
    std::fprintf(stderr, "elastic_train: ranks disagree or did not converge (drift %g, error %g)\n",
                 drift, error);
    return 1;
  }
  return 0;
}
