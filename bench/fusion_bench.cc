// fusion_bench: tensor fusion through the full runtime path (hvd::Init, negotiation, response
// cache, fusion buffer, background thread). One step is ResNet-50's backward pass as the runtime
// sees it: 161 float32 gradients submitted with AllreduceAsync in reverse layer order, then
// waited for. The same steps run with fusion on (HVD_FUSION_THRESHOLD, 128 MiB by default) and
// off (0), interleaved so that drift in a noisy machine hits both alike.
//
//   fusion_bench -np 4 [--steps 10] [--warmup 3] [--rounds 3] [--blocks 2] [--threshold 128M]
//
// HVD_FUSION_THRESHOLD is read at Init. A round is one launch of np ranks (bench_util.h's
// launcher); in it the ranks run `--blocks` pairs of sessions (Init, warmup, timed steps,
// Shutdown), one fused and one unfused, back to back over the same gradient memory, the pair's
// order swapped every block and every launch. Why in one launch: on this VM a launch's placement
// and the machine's phase (a step 4x slower for seconds) decided more than fusion did when each
// configuration was a launch of its own; a pair of sessions a few hundred milliseconds apart sees
// the same phase and the same pages, so the ratio within each pair is the figure (the median over
// all pairs). Under hvdrun (HVD_SIZE set) it is one rank of one launch and measures the
// configuration the environment gives, in one session. After each session's timed steps every rank
// refills its gradients with rank-dependent small integers, runs one more step and checks every
// element exactly. Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed.
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/context.h"
#include "gpu/resnet50_shapes.h"
#include "hvd/hvd.h"

namespace hvd::bench {
namespace {

using runtime::core::EngineStats;

constexpr int kMaxSteps = 1000;
constexpr int kMaxBlocks = 20;
constexpr size_t kDefaultThreshold = size_t{128} << 20;  // the runtime's own default

struct Options {
  int np = 2;
  bool np_given = false;
  int steps = 10, warmup = 3, rounds = 3, blocks = 2;
  size_t threshold = kDefaultThreshold;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "fusion_bench: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: fusion_bench -np N [--steps 10] [--warmup 3] [--rounds 3] [--blocks 2] "
               "[--threshold 128M]\n"
               "  -np          ranks to fork (1..64); under HVD_SIZE it must match or be left out\n"
               "  --steps      timed steps per session (1..%d)\n"
               "  --warmup     untimed steps per session before them (the first one negotiates)\n"
               "  --rounds     launches (1..100)\n"
               "  --blocks     fused/unfused session pairs per launch, order swapped each (1..%d)\n"
               "  --threshold  HVD_FUSION_THRESHOLD of the fused configuration; suffix K, M, G\n"
               "Under hvdrun (HVD_SIZE set) one session runs the configuration the environment\n"
               "gives; --rounds, --blocks and --threshold then do not apply.\n",
               kMaxSteps, kMaxBlocks);
  std::exit(error.empty() ? 0 : kExitUsage);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   long long n;
                   if (ParseNpFlag(flag, v, bad, &o.np, &o.np_given)) {
                   } else if (flag == "--steps") {
                     if (!ParseInt(v, 1, kMaxSteps, &n)) bad("a step count 1..1000");
                     o.steps = static_cast<int>(n);
                   } else if (flag == "--warmup") {
                     if (!ParseInt(v, 0, 1000, &n)) bad("a warmup step count 0..1000");
                     o.warmup = static_cast<int>(n);
                   } else if (flag == "--rounds") {
                     if (!ParseInt(v, 1, 100, &n)) bad("a round count 1..100");
                     o.rounds = static_cast<int>(n);
                   } else if (flag == "--blocks") {
                     if (!ParseInt(v, 1, kMaxBlocks, &n)) bad("a block count 1..20");
                     o.blocks = static_cast<int>(n);
                   } else if (flag == "--threshold") {
                     if (!ParseBytes(v, &o.threshold))
                       bad("a byte count >= 1 like 65536, 64K or 128M");
                   } else {
                     return false;
                   }
                   return true;
                 });
  return o;
}

// ---- The model ----

// torchvision.models.resnet50()'s 161 gradients (gpu/resnet50_shapes.h, shared with gpu_bench).
using Param = ParamShape;

std::vector<Param> ResNet50() {
  return ResNet50Shapes();
}

int64_t NumElements(const Param& p) {
  return p.elements();
}

// ---- One rank of one launch ----

// What rank 0 hands back to the launcher for each session (in memory shared across fork).
struct SessionResult {
  bool done = false;
  int64_t wrong = 0;                    // summed over ranks
  EngineStats timed;                    // rank 0's engine counters over the timed steps
  double step_seconds[kMaxSteps] = {};  // the slowest rank's, per step
};

// Rank r's value of element i: small integers, so every partial sum is exact in float32 and the
// average is exactly what the runtime computes (the sum times float(1/np)).
float Pattern(int rank, size_t i) {
  return static_cast<float>((i * 7 + rank * 3 + 1) % 8);
}

// One backward pass: every gradient submitted as backprop produces it (last layer first), then
// waited for. Returns the first error.
Status Step(const std::vector<Param>& params, std::vector<Tensor>& grads,
            std::vector<Handle>& handles) {
  for (size_t i = grads.size(); i-- > 0;) {
    handles[i] = AllreduceAsync(params[i].name, grads[i], grads[i]);
  }
  Status first;
  for (size_t i = grads.size(); i-- > 0;) {
    Status s = handles[i].Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

AllreduceOptions With(ReduceOp op) {
  AllreduceOptions o;
  o.op = op;
  return o;
}

// Field by field: EngineStats has grown fields between these (a positional initializer put the
// collectives into the cache hits' place).
EngineStats Delta(const EngineStats& a, const EngineStats& b) {
  EngineStats d;
  d.cycles = b.cycles - a.cycles;
  d.slow_path_cycles = b.slow_path_cycles - a.slow_path_cycles;
  d.cache_hits = b.cache_hits - a.cache_hits;
  d.negotiated = b.negotiated - a.negotiated;
  d.allreduce_collectives = b.allreduce_collectives - a.allreduce_collectives;
  return d;
}

// One session: Init (with the environment's HVD_FUSION_THRESHOLD), warmup, the timed steps, the
// exact check, Shutdown. `grads` views `storage`, which outlives the session.
Status RunSession(const Options& o, const RankEnv& env, const std::vector<Param>& params,
                  std::vector<float>& storage, SessionResult* out) {
  Status s = Init();  // reads HVD_RANK, HVD_SIZE, HVD_RENDEZVOUS, HVD_FUSION_THRESHOLD
  if (!s.ok()) return s;
  std::vector<Tensor> grads;
  for (size_t i = 0, offset = 0; i < params.size(); offset += NumElements(params[i]), ++i) {
    grads.push_back(Tensor{storage.data() + offset, DataType::kFloat32, params[i].shape});
  }
  std::vector<Handle> handles(grads.size());
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = Pattern(env.rank, i);

  for (int i = 0; i < o.warmup && s.ok(); ++i) s = Step(params, grads, handles);
  if (s.ok()) s = Barrier();  // start the timed steps together
  const EngineStats before = runtime::core::CurrentEngineStats();
  std::vector<double> seconds(o.steps);
  for (int i = 0; i < o.steps && s.ok(); ++i) {
    auto t0 = Clock::now();
    s = Step(params, grads, handles);
    seconds[i] = SecondsSince(t0);
  }
  const EngineStats timed = Delta(before, runtime::core::CurrentEngineStats());
  if (s.ok()) {
    s = Allreduce("fusion_bench.seconds", MakeTensor(seconds.data(), DataType::kFloat64, o.steps),
                  MakeTensor(seconds.data(), DataType::kFloat64, o.steps), With(ReduceOp::kMax));
  }

  // Correctness after the timed steps: fresh rank-dependent values, one more step, all checked.
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = Pattern(env.rank, i);
  if (s.ok()) s = Step(params, grads, handles);
  int64_t wrong = 0;
  const float inv = static_cast<float>(1.0 / env.size);
  for (size_t i = 0; i < storage.size() && s.ok(); ++i) {
    float sum = 0;
    for (int r = 0; r < env.size; ++r) sum += Pattern(r, i);
    if (storage[i] != sum * inv) ++wrong;
  }
  if (s.ok()) {
    s = Allreduce("fusion_bench.wrong", MakeTensor(&wrong, DataType::kInt64, 1),
                  MakeTensor(&wrong, DataType::kInt64, 1), With(ReduceOp::kSum));
  }
  Status down = Shutdown();
  if (!s.ok()) return s;
  if (!down.ok()) return down;
  out->wrong = wrong;
  out->timed = timed;
  std::copy(seconds.begin(), seconds.end(), out->step_seconds);
  out->done = true;
  return Status::OK();
}

// The sessions of one launch: `thresholds` in order (the environment's configuration alone when
// it is empty). Rank 0 hands each session's figures back in `out`.
int RunRank(const Options& o, const RankEnv& env, const std::vector<Param>& params,
            const std::vector<size_t>& thresholds, SessionResult* out) {
  signal(SIGPIPE, SIG_IGN);  // a dead peer must be an error status, not a silent exit
  // One contiguous allocation, as frameworks keep gradients; each tensor is a view into it.
  std::vector<float> storage(kResNet50Params);
  const size_t sessions = std::max<size_t>(thresholds.size(), 1);
  int64_t wrong = 0;
  for (size_t k = 0; k < sessions; ++k) {
    if (!thresholds.empty()) {
      setenv("HVD_FUSION_THRESHOLD", std::to_string(thresholds[k]).c_str(), 1);
    }
    SessionResult r;
    Status s = RunSession(o, env, params, storage, &r);
    if (!s.ok()) {
      std::fprintf(stderr, "fusion_bench: rank %d, session %zu: %s\n", env.rank, k + 1,
                   s.ToString().c_str());
      return kExitFailed;
    }
    wrong += r.wrong;
    if (env.rank == 0) out[k] = r;
  }
  return wrong == 0 ? 0 : kExitWrong;
}

// ---- Reporting ----

double GradientBytes() {
  return kResNet50Params * 4.0;
}

std::string Env(const char* name, const char* alias, const char* otherwise) {
  for (const char* n : {name, alias}) {
    const char* v = n ? std::getenv(n) : nullptr;
    if (v && *v) return v;
  }
  return otherwise;
}

void PrintHeader(const Options& o, int np, const std::vector<Param>& params) {
  size_t small = 0;
  for (const Param& p : params) small += NumElements(p) * 4 < (64 << 10);
  std::printf(
      "# fusion_bench: ResNet-50 gradients through hvd (AllreduceAsync, average), %d ranks\n", np);
  std::printf("# machine: %s\n", MachineLine().c_str());
  std::printf("# %zu float32 tensors (%zu under 64 KiB), %lld parameters, %.1f MB per step\n",
              params.size(), small, static_cast<long long>(kResNet50Params), GradientBytes() / 1e6);
  std::printf("# HVD_CYCLE_TIME %s ms; %d timed steps after %d warmup per session\n",
              Env("HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME", "1 (default)").c_str(), o.steps,
              o.warmup);
  std::printf(
      "# step: the slowest rank's; GB/s: gradient bytes / step; per-step counts: rank 0's"
      " engine over the timed steps\n");
  std::printf("# %-8s %7s %11s %10s %10s %8s %10s %8s %10s %8s %6s\n", "config", "session",
              "threshold", "median(ms)", "min(ms)", "GB/s", "coll/step", "cyc/step", "hits/step",
              "negot.", "#wrong");
}

void PrintRow(const char* config, const std::string& session, const std::string& threshold,
              const std::vector<double>& steps, const SessionResult& r) {
  const double n = static_cast<double>(steps.size()), med = Median(steps);
  std::printf("  %-8s %7s %11s %10.2f %10.2f %8.3f %10.1f %8.1f %10.1f %8llu %6lld\n", config,
              session.c_str(), threshold.c_str(), med * 1e3,
              *std::min_element(steps.begin(), steps.end()) * 1e3, GradientBytes() / med / 1e9,
              r.timed.allreduce_collectives / n, r.timed.cycles / n, r.timed.cache_hits / n,
              static_cast<unsigned long long>(r.timed.negotiated), static_cast<long long>(r.wrong));
  std::fflush(stdout);
}

// Launches of fused and unfused session pairs; a summary over all steps and over the pairs.
int LaunchAll(const Options& o, const std::vector<Param>& params) {
  const size_t sessions = 2 * static_cast<size_t>(o.blocks);
  const size_t bytes = sizeof(SessionResult) * sessions;
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) {
    std::fprintf(stderr, "fusion_bench: mmap: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  auto* results = static_cast<SessionResult*>(shared);
  PrintHeader(o, o.np, params);
  struct Config {
    const char* name;
    size_t threshold;
    std::vector<double> steps;  // all sessions
    double collectives = 0;     // over all sessions' steps
  };
  Config configs[2] = {{"fused", o.threshold, {}}, {"unfused", 0, {}}};
  std::vector<double> ratios;  // per pair: the unfused session's median step / the fused one's
  int status = 0;
  for (int round = 1; round <= o.rounds && status != kExitFailed; ++round) {
    // Session k runs configs[order[k]]. Which goes first alternates by block and by launch, so
    // that neither configuration always has a launch's first, cold session (fresh pages, first
    // Init).
    std::vector<int> order;
    std::vector<size_t> thresholds;
    for (int b = 0; b < o.blocks; ++b) {
      const int first = (b + round - 1) % 2;
      for (int c : {first, 1 - first}) {
        order.push_back(c);
        thresholds.push_back(configs[c].threshold);
      }
    }
    for (size_t k = 0; k < sessions; ++k) results[k] = SessionResult{};
    const int rc = LaunchRanks("fusion_bench", o.np, [&](const RankEnv& env) {
      return RunRank(o, env, params, thresholds, results);
    });
    status = std::max(status, rc);
    const bool all_done =
        std::all_of(results, results + sessions, [](const SessionResult& r) { return r.done; });
    double median[2] = {0, 0};
    for (size_t k = 0; k < sessions && results[k].done; ++k) {  // a failed launch's done ones too
      Config& c = configs[order[k]];
      std::vector<double> steps(results[k].step_seconds, results[k].step_seconds + o.steps);
      PrintRow(c.name, std::to_string(round) + "." + std::to_string(k / 2 + 1),
               std::to_string(c.threshold), steps, results[k]);
      if (rc == kExitFailed || !all_done) continue;
      c.steps.insert(c.steps.end(), steps.begin(), steps.end());
      c.collectives += static_cast<double>(results[k].timed.allreduce_collectives);
      median[order[k]] = Median(steps);
      if (k % 2 == 1) ratios.push_back(median[1] / median[0]);
    }
    if (rc == kExitFailed || !all_done) status = kExitFailed;
  }
  munmap(shared, bytes);
  if (status == kExitFailed) return status;
  std::printf("# summary over %d launches x %d session pairs x %d steps (median of all steps)\n",
              o.rounds, o.blocks, o.steps);
  for (const Config& c : configs) {
    const double med = Median(c.steps);
    std::printf("  %-8s threshold %11zu: step %8.2f ms, %7.3f GB/s, %6.1f allreduces/step\n",
                c.name, c.threshold, med * 1e3, GradientBytes() / med / 1e9,
                c.collectives / c.steps.size());
  }
  std::printf("# medians of all steps, unfused / fused: %.2fx\n",
              Median(configs[1].steps) / Median(configs[0].steps));
  const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
  const auto faster = std::count_if(ratios.begin(), ratios.end(), [](double r) { return r > 1; });
  std::printf(
      "# speedup fused/unfused (unfused step / fused step, median over %zu session pairs): %.2fx "
      "(pairs %.2f-%.2fx, fused faster in %lld)\n",
      ratios.size(), Median(ratios), *lo, *hi, static_cast<long long>(faster));
  return status;
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  using namespace hvd::bench;
  Options o = ParseArgs(argc, argv);
  std::string error;
  std::optional<RankEnv> env = RankFromEnvironment(o.np_given ? o.np : 0, &error);
  if (!error.empty()) Usage(error);

  // The model must be ResNet-50 exactly, or the sizes (and the results) mean something else.
  const std::vector<Param> params = ResNet50();
  int64_t total = 0;
  for (const Param& p : params) total += NumElements(p);
  if (params.size() != kResNet50Tensors || total != kResNet50Params) {
    std::fprintf(stderr, "fusion_bench: model has %zu tensors, %lld parameters; want %zu, %lld\n",
                 params.size(), static_cast<long long>(total), kResNet50Tensors,
                 static_cast<long long>(kResNet50Params));
    return kExitFailed;
  }
  if (!env) return LaunchAll(o, params);

  // One rank of a job hvdrun started: one session, the configuration the environment gives.
  SessionResult result;
  if (env->rank == 0) PrintHeader(o, env->size, params);
  int rc = RunRank(o, *env, params, {}, &result);
  if (env->rank == 0 && result.done) {
    PrintRow("env", "1", Env("HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", "default"),
             std::vector<double>(result.step_seconds, result.step_seconds + o.steps), result);
  }
  return rc;
}
