// Elastic membership (hvdrun --min-np/--max-np, docs/elastic.md): which ranks form the job, as
// the launcher publishes it, and how a process joins the newest membership in place.
//
// Vocabulary:
//   worker      one process of the job, named by a stable id (HVD_WORKER_ID) that the launcher
//               gave it when it started it; it keeps the id whatever its rank becomes.
//   generation  one membership of the job, numbered 0, 1, 2... by the launcher, which writes it
//               once (base::ElasticGenerationKey) and then moves base::ElasticLatestKey to it:
//               the ids of its workers in rank order. A worker that fails or a host that joins
//               makes a new generation; ranks are the positions of the ids in it.
//   session     what hvd::Init() makes. An elastic Init joins the newest generation that names
//               this worker. Its ranks meet under a scope of their own (ElasticScope), so that
//               a second session in the same generation (after a collective failed while every
//               worker lived) never reads the first one's addresses.
//
// Superseded: while ranks wait for each other in generation G, the launcher may publish G+1
// (a member died before it arrived). Every rank must then take the same decision, or some would
// form G and wait for others gone to G+1 until the connect timeout: the first rank to ask decides
// for all, through an atomic counter (DecideMeeting), whether G formed (every member had
// arrived) or was superseded.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "hvd/status.h"
#include "rendezvous/store.h"

namespace hvd::runtime::core {

struct ElasticSettings {
  bool enabled = false;                       // HVD_ELASTIC
  int worker_id = -1;                         // HVD_WORKER_ID
  std::chrono::milliseconds timeout{600000};  // HVD_ELASTIC_TIMEOUT_SECONDS
};
// InvalidArgument naming the variable when a value is wrong (HVD_ELASTIC=1 without a worker id).
Status ReadElasticSettings(ElasticSettings* out);

struct Membership {
  int64_t generation = 0;
  std::vector<int> workers;  // ids in rank order
  int rank = -1;             // this worker's position
  int session = 0;           // how many sessions of this process tried this generation before
};

// FailedPrecondition when a worker of the job finished while others lived
// (base::ElasticFinishedKey): the job is ending, a failed collective is not re-formed.
Status CheckNotFinished(rendezvous::Store& attempt_store);

// The newest generation the launcher published in `attempt_store` (the job attempt's scope):
// waits for the first one until `deadline`. NotFound-free: DeadlineExceeded naming the key.
Status LatestGeneration(rendezvous::Store& attempt_store,
                        std::chrono::steady_clock::time_point deadline, int64_t* generation);
// Generation `g`'s workers. NotFound when it is not published (yet).
Status GenerationWorkers(rendezvous::Store& attempt_store, int64_t g, std::vector<int>* workers);

// The newest generation that names `worker_id`, waiting until `deadline` for one to be
// published; `session` filled in from this process's count (NextSession). DeadlineExceeded
// when the newest generation leaves the worker out (the launcher counts it as gone) or none
// is published, saying which.
Status FindMembership(rendezvous::Store& attempt_store, int worker_id,
                      std::chrono::steady_clock::time_point deadline, Membership* out);

// The scope (under the attempt's) where generation `g`'s session `session` meets: the attempt's
// own for the job's first meeting (so the launcher sees ranks arrive), else
// "<attempt>/elastic/<g>/init/<session>".
std::string ElasticScope(const std::string& attempt_scope, int64_t g, int session);

// After a wait for every member of generation `g` in `meeting_store` (the session's scope):
// `complete` says whether every member arrived. When not, and generation g+1 is not published,
// *decided is false (keep waiting). Otherwise the first rank to get here decides for everyone
// whether the meeting formed or was superseded, and *formed says which.
Status DecideMeeting(rendezvous::Store& attempt_store, rendezvous::Store& meeting_store, int64_t g,
                     bool complete, std::chrono::milliseconds timeout, bool* decided, bool* formed);

// A re-forming worker's report of the members that do not come back (docs/elastic.md, "A worker
// that hangs"): a worker that fails a collective because a peer stopped answering (SIGSTOPped,
// its whole process stuck) meets the others again, but the hung peer never does, and the
// launcher still counts it live. Once this worker has waited `after` (HVD_PEER_TIMEOUT_SECONDS)
// at the meeting, it writes absent/<worker_id> (base::ElasticAbsence) to the attempt's store for
// the members missing from `meeting_store` that this process formed its previous session with
// (`ran_with`: they ran hvd, so not arriving is not a slow start; a worker new to the job is not
// reported); the launcher stops them and publishes a generation without them. Checked
// at most once a second, written again only when the missing set changes. Not thread-safe: one
// per meeting.
class AbsenceReporter {
 public:
  AbsenceReporter(rendezvous::Store* attempt_store, const Membership& membership, int worker_id,
                  std::vector<int> ran_with, std::chrono::milliseconds after);
  // Call while waiting for the meeting; does nothing before `after` has passed.
  Status Check(rendezvous::Store& meeting_store);

 private:
  rendezvous::Store* const attempt_store_;
  const Membership membership_;
  const int worker_id_;
  const std::set<int> ran_with_;
  const std::chrono::steady_clock::time_point start_;
  const std::chrono::steady_clock::time_point due_;
  const std::chrono::milliseconds interval_;
  std::vector<int> reported_;
  std::set<int> arrived_;  // seen at the meeting (they stay)
  std::chrono::steady_clock::time_point next_check_;
};

// The workers this process formed its last elastic session with (empty before the first), as
// AbsenceReporter takes them; set after each meeting that formed.
std::vector<int>& FormedWith();

// The workers this process saw arrive at meetings that were superseded since its last session
// formed (cleared when one forms). They reached hvd.init(), so, like FormedWith()'s, not coming
// to the next meeting is not a slow start: a worker that hung while the others waited for a
// newcomer at its first meeting was reported by nobody.
std::vector<int>& MetSinceFormed();

// Adds to MetSinceFormed() the members of `membership` whose host/ key is in `meeting_store`
// (a meeting that was superseded). Errors other than NotFound are returned.
Status NoteWhoCame(rendezvous::Store& meeting_store, const Membership& membership);

// Whom an AbsenceReporter of this process reports: FormedWith() and MetSinceFormed().
std::vector<int> ExpectedAtMeetings();

// Whether `newer` lost workers of `current` and gained none (Horovod's skip_sync: the survivors
// hold the same state, so nothing need be broadcast).
bool OnlyRemoved(const std::vector<int>& current, const std::vector<int>& newer);

// Writes base::RankKeyKind::kCommitted for this session's worker: it holds the training state,
// so the launcher may stop workers its discovery script no longer lists (launcherd/job_shrink.cc).
// Called by hvd::ElasticCommitted (a program's commit, after its state was synced and saved). A
// failed write is logged (the caller tries again at its next commit).
Status NoteCommitted(rendezvous::Store& attempt_store, const Membership& membership);

}  // namespace hvd::runtime::core
