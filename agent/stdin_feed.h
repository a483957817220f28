// A rank's standard input, fed from the launcher (hvdrun --stdin, rank 0 by default): the rank's
// stdin is a pipe (rank_runner.h), and a StdinFeed owns the pipe's write end, fills it with what
// AgentGateway.ReadStdin streams, and closes it at the input's end, so the rank reads EOF.
// Bounded: one chunk at a time, written as the pipe has room; while the rank does not read, the
// stream's flow control holds the launcher (and hvdrun) back. Destroying the feed (the rank has
// exited) cancels the call and closes the pipe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "control/tls.h"

namespace hvd::agent {

class StdinFeed {
 public:
  virtual ~StdinFeed() = default;  // stops feeding, closes the pipe, joins its thread
};

// Starts a thread that reads the input of (job, attempt, rank) from the launcher at `launcher`
// and writes it to `fd` (the pipe's write end; owned from now on). A call that fails (the launcher
// restarted, the job ended) is logged and ends the input the same way: the rank reads EOF.
std::unique_ptr<StdinFeed> StartLauncherStdinFeed(const std::string& launcher,
                                                  const std::string& token,
                                                  const std::string& job_id, int attempt, int rank,
                                                  int fd, const control::TlsConfig& tls = {});

// Writes all of `data` to `fd` (made non-blocking), waiting for room in 100 ms slices. False when
// the reader is gone (EPIPE) or `stop` became true. SIGPIPE must be blocked in the calling thread.
bool WriteAllUntil(int fd, std::string_view data, const std::atomic<bool>& stop);

}  // namespace hvd::agent
