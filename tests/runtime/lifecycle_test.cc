// The session lifecycle through the public API: Init() and Shutdown() are idempotent, a process
// can run many Init/Shutdown sessions in a row without leaking threads, descriptors or
// shared-memory mappings, and a rank whose peers shut down while it still has operations pending
// gets an error on each of them, never a hang. A process forked from a rank leaves its session
// alone.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime_env.h"
#include "testutil/multiproc.h"
#include "testutil/proc_counts.h"

namespace hvd {
namespace {

using testing::Check;
using testing::Contains;
using testing::CountEntries;
using testing::ExpectEqual;
using testing::InitRank;
using testing::RunRanks;
using testing::SettledThreadCount;
using testing::ThreadsSettlingAtMost;

// Mappings of shared-memory segments: hvd's are memfds ("/memfd:hvd-shm:... (deleted)",
// transport/shm/segment.cc); POSIX shm would show as /dev/shm.
int CountShmMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) {
    if (Contains(line, "memfd:") || Contains(line, "/dev/shm/")) ++n;
  }
  return n;
}

struct Resources {
  int threads = 0;
  int fds = 0;  // includes the descriptor that reads /proc/self/fd
  int shm_maps = 0;

  static Resources Now() {
    Resources r;
    r.threads = static_cast<int>(CountEntries("/proc/self/task"));
    r.fds = static_cast<int>(CountEntries("/proc/self/fd"));
    r.shm_maps = CountShmMappings();
    return r;
  }
  // After an Init or a Shutdown: threads they joined are no longer listed (testutil/proc_counts.h).
  static Resources Settled() {
    Resources r = Now();
    r.threads = static_cast<int>(SettledThreadCount());
    return r;
  }
  // After a Shutdown, for comparing with `limit`: a joined thread still listed is waited for.
  static Resources SettledAtMost(const Resources& limit) {
    Resources r = Now();
    r.threads = static_cast<int>(ThreadsSettlingAtMost(static_cast<size_t>(limit.threads)));
    return r;
  }
  std::string ToString() const {
    return "threads " + std::to_string(threads) + ", fds " + std::to_string(fds) +
           ", shm mappings " + std::to_string(shm_maps);
  }
};

std::string Seconds(std::chrono::steady_clock::time_point since) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
  return buf;
}

// (a) Init() on an initialized process succeeds and does nothing; Shutdown() twice is fine.
TEST(Lifecycle, InitTwiceIsANoOpAndShutdownTwiceIsFine) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(Shutdown());  // before any Init: nothing to do
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    const Resources before = Resources::Settled();  // Init joined its connecting threads
    // Different options must not matter either: the running session is kept.
    InitOptions other;
    other.rank = 1 - rank;
    other.size = 5;
    HVD_RETURN_IF_ERROR_CTX(Init(), "second Init");
    HVD_RETURN_IF_ERROR_CTX(Init(other), "third Init, other options");
    const Resources after = Resources::Now();
    HVD_RETURN_IF_ERROR(Check(IsInitialized() && Rank() == rank && Size() == size,
                              "topology changed by a repeated Init: rank " +
                                  std::to_string(Rank()) + " size " + std::to_string(Size())));
    HVD_RETURN_IF_ERROR(Check(after.threads == before.threads && after.fds == before.fds &&
                                  after.shm_maps == before.shm_maps,
                              "repeated Init changed the process: before " + before.ToString() +
                                  ", after " + after.ToString()));
    std::vector<int32_t> v(4, rank + 1);
    HVD_RETURN_IF_ERROR(Allreduce("a", MakeTensor(v.data(), DataType::kInt32, 4),
                                  MakeTensor(v.data(), DataType::kInt32, 4), testing::Sum()));
    HVD_RETURN_IF_ERROR(
        ExpectEqual("allreduce after repeated Init", v, std::vector<int32_t>(4, 3)));
    HVD_RETURN_IF_ERROR_CTX(Shutdown(), "first Shutdown");
    HVD_RETURN_IF_ERROR(Check(!IsInitialized() && Rank() == -1, "initialized after Shutdown"));
    HVD_RETURN_IF_ERROR_CTX(Shutdown(), "second Shutdown");
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// (b) Many sessions in one process: each checks an allreduce; the process ends with no more
// threads, descriptors or shared-memory mappings than after the first session.
void RunCycles(int size, int cycles, bool shm) {
  const auto start = std::chrono::steady_clock::now();
  testing::RunOptions opts;
  opts.timeout = std::chrono::milliseconds(100000);
  auto res = RunRanks(
      size,
      [cycles, shm](int rank, int size, const std::string& dir) -> Status {
        setenv("HVD_SHM", shm ? "1" : "0", 1);
        Resources first;
        const auto t0 = std::chrono::steady_clock::now();
        for (int c = 0; c < cycles; ++c) {
          const std::string at = "cycle " + std::to_string(c);
          HVD_RETURN_IF_ERROR_CTX(InitRank(rank, size, dir), at + ": Init");
          HVD_RETURN_IF_ERROR(Check(Rank() == rank && Size() == size, at + ": topology"));
          if (c == 0) {
            // The counts must see what a session holds, or the leak check below proves nothing.
            const Resources running = Resources::Now();
            HVD_RETURN_IF_ERROR(Check(
                running.threads > 1 && (running.shm_maps > 0) == shm,
                "while a session runs (shm=" + std::to_string(shm) + "): " + running.ToString()));
          }
          std::vector<int64_t> v(1000, (rank + 1) * (c + 1));
          HVD_RETURN_IF_ERROR_CTX(
              Allreduce("v", MakeTensor(v.data(), DataType::kInt64, 1000),
                        MakeTensor(v.data(), DataType::kInt64, 1000), testing::Sum()),
              at);
          const int64_t want = int64_t{size} * (size + 1) / 2 * (c + 1);
          HVD_RETURN_IF_ERROR(ExpectEqual(at, v, std::vector<int64_t>(1000, want)));
          HVD_RETURN_IF_ERROR_CTX(Shutdown(), at + ": Shutdown");
          if (c == 0) first = Resources::Settled();
        }
        const Resources last = Resources::SettledAtMost(first);
        if (rank == 0) {
          std::printf("rank 0: %d cycles in %s; after the first: %s; after the last: %s\n", cycles,
                      Seconds(t0).c_str(), first.ToString().c_str(), last.ToString().c_str());
        }
        return Check(last.threads <= first.threads && last.fds <= first.fds &&
                         last.shm_maps <= first.shm_maps,
                     "rank " + std::to_string(rank) + " leaked over " + std::to_string(cycles) +
                         " Init/Shutdown cycles: after the first " + first.ToString() +
                         "; after the last " + last.ToString());
      },
      opts);
  HVD_EXPECT_RANKS_OK(res);
  std::printf("%d ranks, %d cycles, shm=%d: %s\n", size, cycles, shm ? 1 : 0,
              Seconds(start).c_str());
}

TEST(Lifecycle, HundredCyclesTwoRanksShm) {
  RunCycles(2, 100, /*shm=*/true);
}

TEST(Lifecycle, HundredCyclesFourRanksShm) {
  RunCycles(4, 100, /*shm=*/true);
}

TEST(Lifecycle, HundredCyclesTwoRanksTcp) {
  RunCycles(2, 100, /*shm=*/false);
}

TEST(Lifecycle, HundredCyclesFourRanksTcp) {
  RunCycles(4, 100, /*shm=*/false);
}

// Sessions that also hold a timeline writer and process sets (set runners, group views) leak
// nothing either.
TEST(Lifecycle, CyclesWithTimelineAndProcessSetsLeakNothing) {
  auto res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    setenv("HVD_TIMELINE", (dir + "/timeline.json").c_str(), 1);
    Resources first;
    for (int c = 0; c < 30; ++c) {
      const std::string at = "cycle " + std::to_string(c);
      setenv("HVD_RANK", std::to_string(rank).c_str(), 1);
      setenv("HVD_SIZE", std::to_string(size).c_str(), 1);
      InitOptions o;
      o.rendezvous = "file://" + dir;
      o.process_sets = {{0, 1}};
      o.dynamic_process_sets = true;
      HVD_RETURN_IF_ERROR_CTX(Init(o), at + ": Init");
      int added = -1;
      HVD_RETURN_IF_ERROR_CTX(AddProcessSet({1, 2}, &added), at);
      for (int set : {1, added}) {
        if (!ProcessSetIncluded(set)) continue;
        std::vector<int32_t> v(8, rank + 1);
        AllreduceOptions sum = testing::Sum();
        sum.process_set = set;
        HVD_RETURN_IF_ERROR_CTX(Allreduce("v", MakeTensor(v.data(), DataType::kInt32, 8),
                                          MakeTensor(v.data(), DataType::kInt32, 8), sum),
                                at + ", set " + std::to_string(set));
        const int want = set == 1 ? 1 + 2 : 2 + 3;
        HVD_RETURN_IF_ERROR(
            ExpectEqual(at + ", set " + std::to_string(set), v, std::vector<int32_t>(8, want)));
      }
      HVD_RETURN_IF_ERROR_CTX(RemoveProcessSet(added), at);
      HVD_RETURN_IF_ERROR_CTX(Shutdown(), at + ": Shutdown");
      if (c == 0) first = Resources::Settled();
    }
    const Resources last = Resources::SettledAtMost(first);
    return Check(
        last.threads <= first.threads && last.fds <= first.fds && last.shm_maps <= first.shm_maps,
        "rank " + std::to_string(rank) + " leaked: after the first " + first.ToString() +
            "; after the last " + last.ToString());
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A session after one that a peer ended: meets again and reduces.
Status AllreduceInNewSession(int rank, int size, const std::string& dir) {
  HVD_RETURN_IF_ERROR_CTX(InitRank(rank, size, dir), "Init after the peer's shutdown");
  std::vector<int32_t> v(4, rank + 1);
  HVD_RETURN_IF_ERROR(Allreduce("again", MakeTensor(v.data(), DataType::kInt32, 4),
                                MakeTensor(v.data(), DataType::kInt32, 4), testing::Sum()));
  HVD_RETURN_IF_ERROR(ExpectEqual("allreduce in the next session", v,
                                  std::vector<int32_t>(4, size * (size + 1) / 2)));
  return Shutdown();
}

// (c) Rank 0 shuts down cleanly while every other rank has three allreduces pending that rank 0
// never submits: each of them fails, within seconds, saying a rank shut down; and the job can
// start a new session afterwards.
void PeerShutdownFailsPending(int size) {
  auto res = RunRanks(size, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    auto marker = [&dir](int r) { return dir + "/submitted." + std::to_string(r); };
    if (rank == 0) {
      // Shut down only once the others' operations are queued.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (int r = 1; r < size; ++r) {
        while (access(marker(r).c_str(), F_OK) != 0) {
          if (std::chrono::steady_clock::now() > deadline) {
            return Internal("rank " + std::to_string(r) + " never said it had submitted");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a few negotiation cycles
      HVD_RETURN_IF_ERROR(Shutdown());
      return AllreduceInNewSession(rank, size, dir);
    }
    std::vector<std::vector<float>> bufs(3, std::vector<float>(16, 1.0f));
    std::vector<Handle> handles;
    for (int i = 0; i < 3; ++i) {
      Tensor t = MakeTensor(bufs[i].data(), DataType::kFloat32, 16);
      handles.push_back(AllreduceAsync("pending." + std::to_string(i), t, t));
    }
    std::ofstream(marker(rank)) << "1";
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 3; ++i) {
      Status s = handles[i].WaitFor(std::chrono::seconds(10));
      const std::string which = "pending." + std::to_string(i) + " after " + Seconds(start);
      HVD_RETURN_IF_ERROR(Check(s.code() != StatusCode::kDeadlineExceeded,
                                which + ": still pending 10 s after the peer shut down"));
      HVD_RETURN_IF_ERROR(Check(s.code() == StatusCode::kAborted &&
                                    Contains(s.message(), "shut down by rank 0") &&
                                    Contains(s.message(), "pending"),
                                which +
                                    ": want ABORTED saying rank 0 shut down while it "
                                    "was pending, got " +
                                    s.ToString()));
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    HVD_RETURN_IF_ERROR(Check(secs < 5, "pending operations took " + Seconds(start) + " to fail"));
    HVD_RETURN_IF_ERROR(Shutdown());
    return AllreduceInNewSession(rank, size, dir);
  });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(Lifecycle, PeerShutdownFailsEveryPendingOperationTwoRanks) {
  PeerShutdownFailsPending(2);
}

TEST(Lifecycle, PeerShutdownFailsEveryPendingOperationFourRanks) {
  PeerShutdownFailsPending(4);
}

// A process forked from a rank (a DataLoader worker, os.fork()) that leaves through exit(), whose
// atexit handlers run hvd's Shutdown(), or calls Shutdown() itself, leaves the rank's session
// alone, and a collective it submits fails at once instead of running over the rank's links: it
// hung destroying the parent's copied locks, or closed the parent's shared-memory connections so
// that the rank's next allreduce failed ("rank 1 closed the connection").
TEST(Lifecycle, AForkedChildsExitLeavesTheSessionAlone) {
  auto res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    HVD_RETURN_IF_ERROR(InitRank(rank, size, dir));
    std::vector<int32_t> v(16, rank + 1);
    const Tensor t = MakeTensor(v.data(), DataType::kInt32, 16);
    HVD_RETURN_IF_ERROR(Allreduce("before", t, t, testing::Sum()));
    const pid_t child = fork();
    if (child == 0) {
      // Rank 0's child may read the topology, but not submit into its parent's session; rank 1's
      // shuts down first (nothing to do in a child: OK). Then both exit().
      if (rank == 0) {
        std::vector<int32_t> c(16, 1);
        const Tensor ct = MakeTensor(c.data(), DataType::kInt32, 16);
        const Status in_child = Allreduce("child", ct, ct, testing::Sum());
        if (Rank() != 0 || in_child.code() != StatusCode::kFailedPrecondition ||
            !Contains(in_child.message(), "forked from a rank")) {
          std::fprintf(stderr, "in the child: %s\n", in_child.ToString().c_str());
          _exit(4);
        }
      }
      if (rank == 1 && !Shutdown().ok()) _exit(3);
      std::exit(0);
    }
    HVD_RETURN_IF_ERROR(Check(child > 0, "fork failed"));
    int status = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
        return Check(false, "the forked child did not exit within 20 s (hung in exit)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    HVD_RETURN_IF_ERROR(Check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                              "the forked child ended with status " + std::to_string(status)));
    HVD_RETURN_IF_ERROR(Check(IsInitialized() && Rank() == rank, "the session is gone"));
    std::vector<int32_t> w(16, rank + 1);
    const Tensor u = MakeTensor(w.data(), DataType::kInt32, 16);
    HVD_RETURN_IF_ERROR_CTX(Allreduce("after", u, u, testing::Sum()), "allreduce after the fork");
    HVD_RETURN_IF_ERROR(ExpectEqual("allreduce after the fork", w, std::vector<int32_t>(16, 3)));
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

// One file:// rendezvous directory for run after run (the same job id and attempt each time): a
// rank could read the shm socket name the previous run left and fail at once with "Connection
// refused" (about one run in three), its peer then timing out. Now a refused name is read again.
TEST(Lifecycle, ARendezvousDirectoryReusedRunAfterRun) {
  char tmpl[] = "/tmp/hvd_reused_rdv.XXXXXX";
  const std::string shared = mkdtemp(tmpl);
  for (int run = 0; run < 6; ++run) {
    auto res = RunRanks(2, [&shared, run](int rank, int size, const std::string&) -> Status {
      if (rank == 1 && run % 2 == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      HVD_RETURN_IF_ERROR(InitRank(rank, size, shared));
      std::vector<int32_t> v(4, rank + 1);
      const Tensor t = MakeTensor(v.data(), DataType::kInt32, 4);
      HVD_RETURN_IF_ERROR(Allreduce("x", t, t, testing::Sum()));
      HVD_RETURN_IF_ERROR(Check(v[0] == 3, "sum " + std::to_string(v[0])));
      return Shutdown();
    });
    SCOPED_TRACE("run " + std::to_string(run));
    HVD_EXPECT_RANKS_OK(res);
  }
  (void)!std::system(("rm -rf '" + shared + "'").c_str());
}

}  // namespace
}  // namespace hvd
