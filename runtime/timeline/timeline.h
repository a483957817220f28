// Timeline: a Chrome trace (chrome://tracing, Perfetto) of what happened to every tensor.
//
// Enabled by HVD_TIMELINE=/path/file.json (Horovod: HOROVOD_TIMELINE), or at run time by
// start_timeline(path) / stop_timeline() (HVD_TIMELINE=DYNAMIC: nothing is written until then);
// written by rank 0 only (like Horovod: its coordinator sees every rank's readiness). Each tensor
// gets its own row ("pid" = a stable small integer per name, with a process_name metadata event
// giving the tensor name). Phases per tensor:
//   NEGOTIATE_<OP>      from submission until the coordinator saw it ready on every rank, with an
//                       instant event per rank as its request arrives ("rank 3 ready");
//   QUEUE               from negotiated until the fused batch starts executing;
//   MEMCPY_IN_FUSION_BUFFER, <OP> (e.g. ALLREDUCE, with args: algorithm, bytes, fused tensors),
//   MEMCPY_OUT_FUSION_BUFFER, ending with the op's completion (args: status when not OK).
// With mark_cycles, every engine cycle adds a global instant event "CYCLE_START" (Horovod's
// HOROVOD_TIMELINE_MARK_CYCLES).
//
// One Timeline lives as long as the engine, recording or not, so the engine holds a stable
// pointer. Each Start()..Stop() writes one file that is valid JSON once Stop() returns, with
// balanced B/E on every row: a tensor whose phase began before Start() gets no "E" for it, and
// phases still open at Stop() are ended there. Events are buffered and flushed by a writer thread
// (alive only while recording) so the background loop never waits on the disk.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "hvd/status.h"

namespace hvd::runtime::timeline {

// What an HVD_TIMELINE / HOROVOD_TIMELINE value asks for.
struct TimelineSetting {
  std::string path;      // record to this file from init; empty when off or dynamic
  bool dynamic = false;  // "DYNAMIC": record nothing until start_timeline()
};

// "" = off; "DYNAMIC" (exactly, as Horovod compares it) = dynamic; anything else is a path.
TimelineSetting ParseTimelineSetting(std::string_view value);

// While an instance lives on a thread, the events that thread records name their rows after the
// process set too: "grad [process set 2]". The same tensor name may be pending in two sets at
// once (names are unique per set), and their rows must not mix. Set 0 (the global set) keeps the
// bare name, as Horovod's timeline does. Nests; restores the previous set.
class ScopedProcessSet {
 public:
  explicit ScopedProcessSet(int set_id);
  ~ScopedProcessSet();
  ScopedProcessSet(const ScopedProcessSet&) = delete;
  ScopedProcessSet& operator=(const ScopedProcessSet&) = delete;

 private:
  const int previous_;
};

class Timeline {
 public:
  // A stopped timeline: no file, no thread until Start(). With `writes_file` false (every rank
  // but 0: only the coordinator writes, as in Horovod) Start()/Stop() keep the same state and
  // preconditions, so start_timeline()/stop_timeline() answer alike on every rank, but nothing
  // is opened, no thread runs and the events stay no-ops.
  explicit Timeline(bool writes_file = true);
  ~Timeline();  // Stop()s if started
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  static std::unique_ptr<Timeline> Create(bool writes_file = true);
  // Create() + Start(path, /*mark_cycles=*/false); `*out` is untouched on failure.
  static Status Open(const std::string& path, std::unique_ptr<Timeline>* out);

  // Opens `path` for writing (truncates) and records from now on. FailedPrecondition (naming the
  // file being written) while already started; InvalidArgument when `path` is empty, or naming
  // the path and the errno text when it cannot be opened. Thread-safe.
  Status Start(const std::string& path, bool mark_cycles = false);
  // Ends the open phases, flushes, writes the closing bracket, closes the file and joins the
  // writer thread. FailedPrecondition when not started; Unavailable naming the path when a
  // write failed (the file is then incomplete). Start() may be called again afterwards.
  // Thread-safe.
  Status Stop();
  // Stop() for shutdown paths: no error when not started (failures were already logged).
  // Idempotent.
  void Close();

  // Whether events are being written (never, when !writes_file).
  bool recording() const { return recording_.load(std::memory_order_relaxed); }

  // The event calls below are thread-safe; while not recording they return after one relaxed
  // atomic load (so the engine calls them unconditionally); while recording they enqueue. `name`
  // is the tensor name.

  // One per engine cycle; records "CYCLE_START" only when started with mark_cycles.
  void MarkCycle() {
    if (mark_cycles_.load(std::memory_order_relaxed)) Add(Kind::kMarker, {}, "CYCLE_START", {}, -1);
  }
  void NegotiateStart(std::string_view name, std::string_view op) {
    if (recording()) Add(Kind::kNegotiateStart, name, op, {}, -1);
  }
  void NegotiateRankReady(std::string_view name, int rank) {
    if (recording()) Add(Kind::kRankReady, name, {}, {}, rank);
  }
  void NegotiateEnd(std::string_view name) {
    if (recording()) Add(Kind::kNegotiateEnd, name, {}, {}, -1);
  }
  // Begins a nested activity (QUEUE, MEMCPY_IN_FUSION_BUFFER, ALLREDUCE, ...) on the tensor's row,
  // ending the previous activity of that tensor if one is open. `args_json` is a JSON object
  // text or empty.
  void ActivityStart(std::string_view name, std::string_view activity,
                     std::string_view args_json = {}) {
    if (recording()) Add(Kind::kActivityStart, name, activity, args_json, -1);
  }
  void ActivityEnd(std::string_view name) {
    if (recording()) Add(Kind::kActivityEnd, name, {}, {}, -1);
  }
  // Closes any open activity and marks the operation done (args carry the status when failed).
  void End(std::string_view name, const Status& status) {
    if (recording()) AddEnd(name, status);
  }
  // A process-wide instant event (shutdown, errors).
  void Marker(std::string_view text) {
    if (recording()) Add(Kind::kMarker, {}, text, {}, -1);
  }

 private:
  class Impl;
  enum class Kind {
    kNegotiateStart,
    kRankReady,
    kNegotiateEnd,
    kActivityStart,
    kActivityEnd,
    kEnd,
    kMarker
  };

  // The slow path: formats nothing, only copies the strings into the queue.
  void Add(Kind kind, std::string_view name, std::string_view text, std::string_view args,
           int rank);
  void AddEnd(std::string_view name, const Status& status);

  // Fast-path filters only; Impl decides under its lock whether an event belongs to a recording.
  std::atomic<bool> recording_{false};
  std::atomic<bool> mark_cycles_{false};
  const std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::runtime::timeline
