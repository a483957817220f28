// Multi-process test harness: runs one function as `size` ranks, each in its own forked process,
// and reports every rank's outcome to the (gtest) parent.
//
//   TEST(Allreduce, Works) {
//     hvd::testing::RunResult res = hvd::testing::RunRanks(
//         4, [](int rank, int size, const std::string& store_dir) -> hvd::Status {
//           std::unique_ptr<hvd::runtime::transport::Transport> t;
//           HVD_RETURN_IF_ERROR(hvd::testing::ConnectTcp(rank, size, store_dir, &t));
//           ...  // run collectives, compare; return an error that says what differed
//           return hvd::Status::OK();
//         });
//     HVD_EXPECT_RANKS_OK(res);
//   }
//
// Each child gets the same fresh temporary directory (`store_dir`, for a file store) and reports
// the Status its function returns through a pipe. The parent waits with a deadline; on timeout,
// and `failure_grace` after the first rank fails, it SIGKILLs every child still running. Every
// child is reaped before RunRanks returns, and children also die with their parent
// (PR_SET_PDEATHSIG), so no child can outlive the harness call.
//
// Rules for the function (it runs in a forked child):
//   - REQUIRES: the calling process has no other threads (fork copies only the caller's thread;
//     a lock held by another thread stays locked in the child). A gtest process that has not
//     started hvd's background thread qualifies. Threads created inside the child are fine.
//   - Report problems through the returned Status. EXPECT_*/ASSERT_* inside the child only print;
//     the harness notices that a gtest failure happened in the child and reports the rank as
//     failed, but the message is the printed one, not the Status.
//   - The child ends with _exit(): no static destructors or atexit handlers run; stdio is flushed.
//   - An exception escaping the function is reported as the rank's failure.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hvd/status.h"
#include "transport/transport.h"

namespace hvd::testing {

using RankFn = std::function<Status(int rank, int size, const std::string& store_dir)>;

struct RunOptions {
  // Deadline for the whole run; ranks still running then are killed and reported as timed out.
  std::chrono::milliseconds timeout{120000};
  // After the first rank fails (error status, non-zero exit, signal), the others get this long to
  // finish (e.g. to report their own error about the dead peer) before they are killed.
  std::chrono::milliseconds failure_grace{5000};
  // Keep the temporary store directory (for debugging); it is removed otherwise.
  bool keep_store_dir = false;
};

struct RankResult {
  int rank = 0;
  bool reported = false;  // the child sent a Status (it returned from the function)
  Status status;          // valid when `reported`
  bool exited = false;    // exited normally, with `exit_code`
  int exit_code = -1;
  int term_signal = 0;                   // the signal that ended it, 0 if none
  bool killed_by_harness = false;        // SIGKILLed on timeout or after another rank's failure
  std::chrono::milliseconds elapsed{0};  // from fork to reap

  // Reported OK and exited with code 0.
  bool ok() const { return reported && status.ok() && exited && exit_code == 0; }
  // "rank 2: OK" / "rank 1: killed by signal 9 (Killed) after 1203 ms, no status reported" / ...
  std::string Describe() const;
};

struct RunResult {
  std::vector<RankResult> ranks;  // indexed by rank
  bool timed_out = false;         // the deadline passed with ranks still running
  std::chrono::milliseconds elapsed{0};
  std::string store_dir;  // removed unless RunOptions::keep_store_dir

  bool ok() const;
  // Every failing rank's Describe(), one per line; "" when ok().
  std::string FailureMessage() const;
};

// Forks `size` children running fn(rank, size, store_dir) and waits for them (see above).
// Harness failures (fork, pipe, mkdtemp) are reported as failed ranks, never thrown.
RunResult RunRanks(int size, RankFn fn, RunOptions options = {});

// Builds the TCP mesh for `rank` of `size` over a file store in `store_dir` (127.0.0.1, default
// TcpOptions except `scope`). The store is only needed while connecting.
Status ConnectTcp(int rank, int size, const std::string& store_dir,
                  std::unique_ptr<runtime::transport::Transport>* out,
                  const std::string& scope = "default");

// `size` ranks spread over `hosts` simulated hosts, consecutive ranks together: "host0", ...
// (rank r on host r * hosts / size).
std::vector<std::string> SplitHosts(int size, int hosts);

// Builds the job transport (transport/connect.h) for `rank` over a file store in `store_dir`:
// shared memory between ranks with equal `hosts` entries when `shm`, TCP on 127.0.0.1 otherwise.
Status ConnectHosts(int rank, int size, const std::string& store_dir,
                    const std::vector<std::string>& hosts, bool shm,
                    std::unique_ptr<runtime::transport::Transport>* out,
                    const std::string& scope = "default");

}  // namespace hvd::testing

// Fails the current test with every failing rank's message unless all ranks succeeded.
#define HVD_EXPECT_RANKS_OK(result)                      \
  do {                                                   \
    const ::hvd::testing::RunResult& _hvd_r = (result);  \
    EXPECT_TRUE(_hvd_r.ok()) << _hvd_r.FailureMessage(); \
  } while (0)
#define HVD_ASSERT_RANKS_OK(result)                      \
  do {                                                   \
    const ::hvd::testing::RunResult& _hvd_r = (result);  \
    ASSERT_TRUE(_hvd_r.ok()) << _hvd_r.FailureMessage(); \
  } while (0)
