// What keeps a job from hanging silently: the timers JobManager::Tick runs over every job that has
// not ended, and what feeds them (docs/control-plane.md):
//   - start timeout: every rank of the attempt must reach the rendezvous (hvd::Init writes
//     job/<id>/attempt/<n>/host/<rank>) within it, or the job fails naming each missing rank, its
//     host and what its agent last said of it; waived, with a note, for a program that does not
//     use hvd when only the launcher's default applies;
//   - stall timeout: the runtime's stall reports (job/<id>/attempt/<n>/stall/<rank>) are shown in
//     the record at once, and fail the job once the oldest has lasted this long;
//   - attached client: a job not submitted detached is cancelled once no attached watcher has
//     been connected for the client lease (hvdrun was killed, or its host died);
//   - restarts: a RESTARTING job whose back-off has passed starts its next attempt;
//   - queue timeout: a job still waiting for slots past its --queue-timeout fails with what it
//     was waiting for (time placed, in the network check or the MASTER_PORT step, not counted);
//   - MASTER_PORT deadline: rank 0's agent, asked, stays silent past it: the job fails naming it;
//     gone, it is not blamed and the job is placed again;
//   - causes: a failure its rank's runtime blamed on a peer is held up to cause_settle.
// The kill grace is the agents' (StopJob carries it, Job::KillGrace).
//
// Holds no lock and reads no clock: every call gets the time, so tests choose it
// (job_supervisor_test.cc). JobManager calls it under its lock and does what Check asks.
#pragma once

#include <chrono>
#include <string>

#include "launcherd/job.h"

namespace hvd::launcherd {

struct SupervisorOptions {
  std::chrono::milliseconds start_timeout{30000};  // when the spec sets none; 0: no limit
  std::chrono::milliseconds client_lease{5000};
  std::chrono::milliseconds master_port_timeout{0};  // for the message naming the deadline
};

class Supervisor {
 public:
  explicit Supervisor(SupervisorOptions options) : options_(options) {}

  // The timers of one job that has not ended, at `now`. What the caller does next:
  //   kNothing:  nothing changed that needs more than the job's own record;
  //   kSettle:   the job ended, failed, restarts or holds no failure any more: settle it (send its
  //              stops, start its next attempt, finish it);
  //   kSchedule: its MASTER_PORT request was dropped (rank 0's agent went away): place it again.
  enum class Next { kNothing, kSettle, kSchedule };
  Next Check(Job& job, Instant now, const AgentConnected& connected,
             const AgentBacklog& backlog = nullptr) const;

  // REQUIRES (both): 0 <= rank < job.status.ranks.size(), the job has not ended.
  // A rank of the current attempt reached the rendezvous (its host/<rank> key, or an elastic
  // worker's at a later meeting: Job::MeetingWorker). Workers added later are not among the np
  // that at_rendezvous counts.
  void RankAtRendezvous(Job& job, int rank, Instant now) const;
  // A rank's stall report (its stall/<rank> key; empty: the stall cleared).
  void StallReport(Job& job, int rank, const std::string& value, Instant now) const;
  // An attached client started or stopped following the job.
  void WatchStarted(Job& job) const { ++job.watchers; }
  void WatchEnded(Job& job, Instant now) const;

  // The individual timers, each true when it changed the job's state (the caller settles it).
  bool CheckClientLease(Job& job, Instant now) const;
  bool CheckStartTimeout(Job& job, Instant now) const;
  // CheckStartTimeout's two halves. The job's first np ranks: all must meet within `timeout` of
  // the attempt's start (an elastic job goes on without late ones once --min-np met).
  bool CheckFirstWorkers(Job& job, std::chrono::milliseconds timeout, Instant now) const;
  // An elastic job's workers added later (growth): each running member that has not met the
  // others `timeout` after it became both (Job::WaitedSince) is removed, once some worker has
  // met (a program without hvd meets nobody).
  bool CheckLateWorkers(Job& job, std::chrono::milliseconds timeout, Instant now) const;
  // A rank that exited with code 0 without reaching the rendezvous, while others of the job wait
  // there for it: they would wait until their own start timeout and then fail, blamed.
  bool CheckLeftBeforeInit(Job& job, Instant now) const;
  // A stall older than --stall-timeout: fails a fixed job naming the rank the others wait for;
  // an elastic job that can re-form removes that worker instead.
  bool CheckStallTimeout(Job& job, Instant now) const;
  bool CheckQueueTimeout(Job& job, Instant now) const;
  // The PENDING job's MASTER_PORT request: failed at its deadline, unless the agent's answer may
  // be among what the launcher read from it before the deadline and has not applied yet
  // (`backlog`); or dropped (kSchedule).
  Next CheckMasterPort(Job& job, Instant now, const AgentConnected& connected,
                       const AgentBacklog& backlog = nullptr) const;

 private:
  const SupervisorOptions options_;
};

}  // namespace hvd::launcherd
