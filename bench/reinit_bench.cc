// reinit_bench: what a second hvd::Init() costs. Each rank runs `--cycles` sessions of
// Init -> one synchronous 4 KiB allreduce -> Shutdown in one process and times, per session,
// Init alone and Init to the first allreduce's completion (the slowest rank's, max-reduced), the
// way an elastic or a test-driven script that re-initializes pays it.
//
//   reinit_bench -np 4 [--cycles 20]
//
// Prints the first session, the median and the worst of the later ones. Ranks meet through a file
// store (forked here) or whatever HVD_RENDEZVOUS says (under hvdrun).
// Exit status: 0 ok, 1 wrong results, 2 bad arguments, 3 a rank failed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"
#include "hvd/hvd.h"

namespace hvd::bench {
namespace {

struct Options {
  int np = 2;
  bool np_given = false;
  int cycles = 20;
};

[[noreturn]] void Usage(const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "reinit_bench: %s\n", error.c_str());
  std::fprintf(error.empty() ? stdout : stderr,
               "usage: reinit_bench -np N [--cycles C]\n"
               "  -np       ranks to fork (1..64); under HVD_SIZE it must match or be left out\n"
               "  --cycles  Init/allreduce/Shutdown sessions per rank (2..1000, default 20)\n");
  std::exit(error.empty() ? 0 : kExitUsage);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  ParseFlagPairs(argc, argv, Usage,
                 [&](const std::string& flag, const char* v, const BadValue& bad) {
                   long long n;
                   if (ParseNpFlag(flag, v, bad, &o.np, &o.np_given)) {
                   } else if (flag == "--cycles") {
                     if (!ParseInt(v, 2, 1000, &n)) bad("an integer 2..1000");
                     o.cycles = static_cast<int>(n);
                   } else {
                     return false;
                   }
                   return true;
                 });
  return o;
}

double Us(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

int RunRank(const Options& o, const RankEnv& env) {
  std::vector<double> init_us, first_us;
  for (int c = 0; c < o.cycles; ++c) {
    const auto t0 = Clock::now();
    Status s = Init();
    const auto t1 = Clock::now();
    float v[1024];
    std::fill(v, v + 1024, static_cast<float>(env.rank + 1));
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    if (s.ok())
      s = Allreduce("reinit", MakeTensor(v, DataType::kFloat32, 1024),
                    MakeTensor(v, DataType::kFloat32, 1024), sum);
    const auto t2 = Clock::now();
    if (s.ok() && v[1023] != static_cast<float>(env.size * (env.size + 1) / 2)) {
      std::fprintf(stderr, "reinit_bench: rank %d: wrong allreduce result %g\n", env.rank, v[1023]);
      return kExitWrong;
    }
    // The slowest rank's times: every rank agrees on them.
    double t[2] = {Us(t1 - t0), Us(t2 - t0)};
    AllreduceOptions max;
    max.op = ReduceOp::kMax;
    if (s.ok())
      s = Allreduce("reinit.times", MakeTensor(t, DataType::kFloat64, 2),
                    MakeTensor(t, DataType::kFloat64, 2), max);
    Status down = Shutdown();
    if (!s.ok() || !down.ok()) {
      std::fprintf(stderr, "reinit_bench: rank %d, session %d: %s\n", env.rank, c + 1,
                   (s.ok() ? down : s).ToString().c_str());
      return kExitFailed;
    }
    init_us.push_back(t[0]);
    first_us.push_back(t[1]);
  }
  if (env.rank == 0) {
    auto summary = [](std::vector<double> v, const char* what) {
      const double first = v[0];
      v.erase(v.begin());
      std::sort(v.begin(), v.end());
      std::printf("  %-34s %10.0f %10.0f %10.0f\n", what, first, v[v.size() / 2], v.back());
    };
    std::printf("# reinit_bench: %d ranks, %d sessions of Init -> 4 KiB allreduce -> Shutdown\n",
                env.size, o.cycles);
    std::printf("# machine: %s\n", MachineLine().c_str());
    std::printf("# times in us, slowest rank; later = sessions 2..%d\n", o.cycles);
    std::printf("# %-34s %10s %10s %10s\n", "", "first", "median", "worst");
    summary(init_us, "Init");
    summary(first_us, "Init to first allreduce done");
  }
  return 0;
}

}  // namespace
}  // namespace hvd::bench

int main(int argc, char** argv) {
  using namespace hvd::bench;
  Options o = ParseArgs(argc, argv);
  std::string error;
  std::optional<RankEnv> env = RankFromEnvironment(o.np_given ? o.np : 0, &error);
  if (!error.empty()) Usage(error);
  if (!env)
    return LaunchRanks("reinit_bench", o.np, [&](const RankEnv& e) { return RunRank(o, e); });
  return RunRank(o, *env);
}
