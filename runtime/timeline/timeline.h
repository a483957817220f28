// Timeline: a Chrome trace (chrome://tracing, Perfetto) of what happened to every tensor.
//
// Enabled by HVD_TIMELINE=/path/file.json (Horovod: HOROVOD_TIMELINE); written by rank 0 only
// (like Horovod: its coordinator sees every rank's readiness). Each tensor gets its own row
// ("pid" = a stable small integer per name, with a process_name metadata event giving the tensor
// name). Phases per tensor:
//   NEGOTIATE_<OP>      from submission until the coordinator saw it ready on every rank, with an
//                       instant event per rank as its request arrives ("rank 3 ready");
//   QUEUE               from negotiated until the fused batch starts executing;
//   MEMCPY_IN_FUSION_BUFFER, <OP> (e.g. ALLREDUCE, with args: algorithm, bytes, fused tensors),
//   MEMCPY_OUT_FUSION_BUFFER, ending with the op's completion (args: status when not OK).
// The file is valid JSON once Close() (called by Shutdown) has run; events are buffered and
// flushed by a writer thread so the background loop never waits on the disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hvd/status.h"

namespace hvd::runtime::timeline {

class Timeline {
 public:
  virtual ~Timeline() = default;

  // Opens `path` for writing (truncates). InvalidArgument naming the path and errno on failure.
  static Status Open(const std::string& path, std::unique_ptr<Timeline>* out);

  // All calls are thread-safe and cheap (they enqueue). `name` is the tensor name.
  virtual void NegotiateStart(std::string_view name, std::string_view op) = 0;
  virtual void NegotiateRankReady(std::string_view name, int rank) = 0;
  virtual void NegotiateEnd(std::string_view name) = 0;
  // Begins a nested activity (QUEUE, MEMCPY_IN_FUSION_BUFFER, ALLREDUCE, ...) on the tensor's row,
  // ending the previous activity of that tensor if one is open. `args_json` is a JSON object
  // text or empty.
  virtual void ActivityStart(std::string_view name, std::string_view activity,
                             std::string_view args_json = {}) = 0;
  virtual void ActivityEnd(std::string_view name) = 0;
  // Closes any open activity and marks the operation done (args carry the status when failed).
  virtual void End(std::string_view name, const Status& status) = 0;
  // A process-wide marker (e.g. "CYCLE_START" is NOT recorded; use for shutdown, errors).
  virtual void Marker(std::string_view text) = 0;

  // Flushes and writes the closing bracket. Idempotent; later calls are ignored.
  virtual void Close() = 0;
};

}  // namespace hvd::runtime::timeline
