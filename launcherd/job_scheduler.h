// Placement of PENDING jobs on agents' slots, and the steps between placement and start, each
// explicit (docs/control-plane.md):
//   1. place: first fit (control/placement.h) in submit order; a job that does not fit yet does
//      not hold back later ones that do. A placement once made is held (Job::placing) while it
//      stays valid: its agents schedulable and its slots free. It does not reserve the slots:
//      a later job that fits may start on them, and the held placement is then given up.
//   2. network check (job_network.cc): a multi-host placement waits for its hosts to probe each
//      other (network_check.h), with the placement it holds; the probe's end wakes the scheduler
//      (NetworkCheck's done callback calls JobManager::Schedule) and the step finds the answer.
//   3. MASTER_PORT (job_master_port.cc): rank 0's agent chooses torchrun's port, with a deadline
//      that the supervisor keeps.
//   4. start: StartRank to every agent, with each rank's environment (control/worker_env.h).
// Placed but not started, a job is still PENDING ("checking the network ...", "choosing
// MASTER_PORT on h0"); falling back to waiting for slots gives the placement up, and that time is
// not counted as waiting by --queue-timeout.
//
// Holds no lock: JobManager calls it under its own. Talks to agents only through their links
// (AgentRegistry::Link), which never block.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "control/placement.h"
#include "control/worker_env.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job.h"
#include "launcherd/master_port.h"

namespace hvd::launcherd {

class NetworkCheck;

struct SchedulerOptions {
  std::string rendezvous_address;  // "host:port" of the runtime's endpoint (HVD_RENDEZVOUS)
  // The launcher's default start timeout: ranks get HVD_START_TIMEOUT_SECONDS past it.
  std::chrono::milliseconds start_timeout{30000};
  // How long rank 0's agent has to choose MASTER_PORT; 0: none is chosen.
  std::chrono::milliseconds master_port_timeout{0};
  NetworkCheck* network = nullptr;  // null: no network check
  bool rendezvous_tls = false;      // the endpoint speaks TLS: ranks dial hvds://
};

class Scheduler {
 public:
  // `agents` must outlive the scheduler.
  Scheduler(SchedulerOptions options, AgentRegistry* agents)
      : options_(std::move(options)), agents_(agents) {}

  // What one pass over the pending jobs sees: the schedulable agents and the slots live ranks
  // hold (a job started in the pass adds its own).
  //
  // Built once per pass and kept current by Advance, never rebuilt per job: a pass runs after
  // rank exits while jobs wait, and at a thousand agents with a hundred jobs waiting, copying the
  // busy slots into every agent and placing afresh for every job took the whole launcher (its
  // lock held 5-30 ms per pass, 100% of the time): agents' answers waited seconds in the inbox
  // and MASTER_PORT deadlines failed jobs whose agents had answered in 40 ms (issue 22).
  struct Pass {
    std::vector<control::AgentSlots> agents;    // busy filled in from `busy`
    std::map<std::string, std::set<int>> busy;  // agent id -> slots
    std::map<std::string, size_t> index;        // agent id -> its place in `agents`
    // First-fit results by np for jobs without a host list, while no job started in the pass:
    // the same request on the same slots places the same way.
    std::map<int, control::PlacementResult> placed_by_np;
  };
  Pass BeginPass(const std::vector<std::shared_ptr<Job>>& jobs) const;
  // The slots of live ranks of jobs not finished, by agent.
  static std::map<std::string, std::set<int>> BusySlots(
      const std::vector<std::shared_ptr<Job>>& jobs);

  // Takes a PENDING job as far as it goes now: placed (or its placement kept), network checked,
  // MASTER_PORT chosen, started. kFailed: the job failed (or restarts) on the way; the caller
  // settles it (its stops, its end).
  // REQUIRES: the job is PENDING.
  enum class Outcome { kWaiting, kStarted, kFailed };
  Outcome Advance(Job& job, Pass* pass, Instant now);

  // Step 1, pure: the job's held placement while it is still valid on `agents` (their busy slots
  // filled in), else a new first-fit placement.
  static control::PlacementResult PlaceStep(const Job& job,
                                            const std::vector<control::AgentSlots>& agents);
  // Whether `placement` can still be used on `agents`: each rank's agent is there with the same
  // host and its slot is free.
  static bool StillValid(const control::PlacementResult& placement,
                         const std::vector<control::AgentSlots>& agents);

  // Step results.
  enum class Step { kReady, kWait, kFailed };
  // REQUIRES (both): job.placing holds the placement of step 1.
  // Step 2 (job_network.cc).
  Step NetworkStep(Job& job, Instant now);
  // Step 3 (job_master_port.cc).
  Step MasterPortStep(Job& job, Instant now);
  // An agent's answer to a MasterPortRequest: kTaken when it was this job's pending request
  // (the caller schedules again: it starts the job, or fails it with the agent's error).
  enum class Answer { kNotThisJob, kIgnored, kTaken };
  Answer OnMasterPort(Job& job, const std::string& agent_id, const MasterPortAnswer& answer,
                      Instant now) const;

  // An elastic RUNNING job below --max-np (job_growth.cc): starts workers on free slots of the
  // pass's agents that the job may use (its -H hosts and their counts, not a slot where one of
  // its workers failed, not an excluded host), up to --max-np. True when it started any (the
  // job has a new generation to publish).
  bool Grow(Job& job, Pass* pass, Instant now);
  // Whether an elastic job could ever get another worker on the pass's agents: one of their
  // slots that none of its live workers holds and none of its failed workers held, on a host not
  // left out for the job's life. Slots other jobs hold count (they free up), and so do hosts its
  // -H list leaves out (a discovery script may name them later). False only for agents that
  // exist: with none, who knows. `why` (when false): where the slots went.
  static bool CouldGrow(const Job& job, const Pass& pass, std::string* why);

 private:
  // PlaceStep over the pass's view, with its index and its first-fit results.
  static control::PlacementResult PlaceInPass(const Job& job, Pass* pass);
  // Keeps `placement` as the job's (the time it was first placed stands).
  void Hold(Job& job, control::PlacementResult placement, Instant now) const;
  // Back to waiting for slots: the time placed does not count towards --queue-timeout, and the
  // MASTER_PORT asked for that placement is asked afresh for the next one.
  void GiveUp(Job& job, Instant now) const;
  void ReportAgentsReady(Job& job, const std::vector<control::AgentSlots>& agents) const;
  // Step 4: StartRank to every agent; false when one could not take it (the job failed).
  bool Start(Job& job, const std::vector<control::AgentSlots>& agents, Instant now);
  // The job's -x variables with what the launcher adds for every rank (Start's and Grow's).
  std::map<std::string, std::string> JobEnv(const Job& job) const;
  // A rank's environment and its StartRank (Start's and Grow's).
  control::WorkerEnvInput EnvInput(const Job& job, const RankStatus& r,
                                   const std::string& advertise_addr, int size,
                                   const std::map<std::string, std::string>& job_env) const;
  StartRankCommand CommandFor(const Job& job, const RankStatus& r,
                              const control::WorkerEnvInput& in) const;

  const SchedulerOptions options_;
  AgentRegistry* const agents_;
};

}  // namespace hvd::launcherd
