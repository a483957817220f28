// Following a job's event stream, shared by the attached run and `hvdrun logs`: prints its output
// through an OutputSink, reports progress and waiting reasons, survives a broken stream by
// resuming from the last line seen, and after the job's final state waits (bounded) until every
// rank is reported gone, so hvdrun never exits while a rank of its job still runs.
#pragma once

#include <chrono>
#include <string>

#include "cli/client.h"
#include "cli/output.h"
#include "control/job_model.h"
#include "hvd/status.h"

namespace hvd::cli {

struct FollowOptions {
  bool follow = true;    // false: only the output so far (`logs` without -f)
  bool verbose = false;  // progress events and state changes
  bool attach = false;   // the submitting client: the job ends if it stays away (Client::Watch)
  int64_t from_seq = 0;
  // How long a broken stream is retried before hvdrun gives up on the launcher.
  std::chrono::milliseconds reconnect_for{30000};
  // After the final state, how long to wait for the launcher to report every rank gone.
  std::chrono::milliseconds ranks_gone_wait{10000};
};

struct FollowResult {
  bool ended = false;         // the job reached a final state
  bool ranks_gone = false;    // and every rank was reported gone
  control::JobStatus status;  // the latest status seen (final when `ended`)
};

// OK when the stream ended normally (with `follow`: the job ended). kCancelled when the client's
// watches were interrupted; otherwise the error that made hvdrun give up, naming the launcher.
Status FollowJob(Client* client, const std::string& job_id, OutputSink* sink,
                 const FollowOptions& options, FollowResult* result);

// Whether every rank of `status` has ended (exited, killed, or never started).
bool AllRanksGone(const control::JobStatus& status);

}  // namespace hvd::cli
