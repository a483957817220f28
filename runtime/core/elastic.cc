#include "core/elastic.h"

#include <algorithm>
#include <map>
#include <set>

#include "base/logging.h"
#include "base/rendezvous_keys.h"
#include "base/settings.h"

namespace hvd::runtime::core {
namespace {

using Clock = std::chrono::steady_clock;

const base::Setting<bool> kElastic(
    "HVD_ELASTIC", "HOROVOD_ELASTIC", false,
    "this worker belongs to an elastic job (hvdrun --min-np/--max-np sets it): Init() joins the "
    "newest membership the launcher published instead of reading HVD_RANK and HVD_SIZE");
const base::Setting<int64_t> kWorkerId("HVD_WORKER_ID", nullptr, -1,
                                       "an elastic worker's stable id (the launcher sets it)",
                                       {-1, 1 << 20});
const base::Setting<double> kElasticTimeout(
    "HVD_ELASTIC_TIMEOUT_SECONDS", nullptr, 600,
    "how long an elastic worker's Init() waits for a membership that names it and for its "
    "members to arrive (hvdrun --elastic-timeout)",
    {0.1, 86400});

// Sessions this process started in each generation (Init() calls are serialized by hvd::Init).
std::map<int64_t, int>& SessionsByGeneration() {
  static auto* m = new std::map<int64_t, int>();
  return *m;
}

std::chrono::milliseconds Left(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

}  // namespace

Status ReadElasticSettings(ElasticSettings* out) {
  HVD_RETURN_IF_ERROR(kElastic.Get(&out->enabled));
  int64_t id = -1;
  HVD_RETURN_IF_ERROR(kWorkerId.Get(&id));
  out->worker_id = static_cast<int>(id);
  double s = 600;
  HVD_RETURN_IF_ERROR(kElasticTimeout.Get(&s));
  out->timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  if (out->enabled && out->worker_id < 0) {
    return InvalidArgument(
        "HVD_ELASTIC=1 but HVD_WORKER_ID is not set: elastic workers are started by hvdrun "
        "--min-np/--max-np (or hvd-launcherd), which gives each its id; unset HVD_ELASTIC (and "
        "HOROVOD_ELASTIC) to run a fixed job");
  }
  return Status::OK();
}

Status LatestGeneration(rendezvous::Store& attempt_store, Clock::time_point deadline,
                        int64_t* generation) {
  const std::string key = base::ElasticLatestKey();
  Status s = attempt_store.Wait({key}, Left(deadline));
  if (s.code() == StatusCode::kDeadlineExceeded) {
    return DeadlineExceeded("no elastic membership in " + attempt_store.Describe() + " (key " +
                            key +
                            "): the launcher publishes one when it starts the job's workers; is "
                            "this worker's HVD_RENDEZVOUS its launcher's?");
  }
  HVD_RETURN_IF_ERROR(s);
  std::string v;
  HVD_RETURN_IF_ERROR(attempt_store.Get(key, &v));
  char* end = nullptr;
  const long long g = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || g < 0) {
    return InvalidArgument("elastic generation \"" + v.substr(0, 40) + "\" is not a number");
  }
  *generation = g;
  return Status::OK();
}

Status GenerationWorkers(rendezvous::Store& attempt_store, int64_t g, std::vector<int>* workers) {
  std::string v;
  HVD_RETURN_IF_ERROR(attempt_store.Get(base::ElasticGenerationKey(g), &v));
  return base::ParseElasticWorkers(v, workers);
}

Status CheckNotFinished(rendezvous::Store& attempt_store) {
  std::string who;
  Status s = attempt_store.Get(base::ElasticFinishedKey(), &who);
  if (s.code() == StatusCode::kNotFound) return Status::OK();
  HVD_RETURN_IF_ERROR(s);
  return FailedPrecondition(who.substr(0, 200) +
                            " finished training (exited 0) while this worker was still at it: "
                            "the elastic job ends as its workers do, and is not re-formed");
}

Status FindMembership(rendezvous::Store& attempt_store, int worker_id, Clock::time_point deadline,
                      Membership* out) {
  HVD_RETURN_IF_ERROR(CheckNotFinished(attempt_store));
  int64_t g = 0;
  HVD_RETURN_IF_ERROR(LatestGeneration(attempt_store, deadline, &g));
  std::vector<int> workers;
  for (;;) {
    Status s = GenerationWorkers(attempt_store, g, &workers);
    if (!s.ok() && s.code() != StatusCode::kNotFound) return s;
    auto it = std::find(workers.begin(), workers.end(), worker_id);
    if (s.ok() && it != workers.end()) {
      out->generation = g;
      out->workers = workers;
      out->rank = static_cast<int>(it - workers.begin());
      out->session = SessionsByGeneration()[g]++;
      return Status::OK();
    }
    // Left out of g: the launcher counts this worker as gone, or g+1 names it (a restarted
    // worker racing the launcher's publication). Wait for the next generation.
    s = attempt_store.Wait({base::ElasticGenerationKey(g + 1)}, Left(deadline));
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceeded("elastic generation " + std::to_string(g) + " (workers " +
                              base::FormatElasticWorkers(workers) + ") does not include worker " +
                              std::to_string(worker_id) +
                              " and no newer one came within HVD_ELASTIC_TIMEOUT_SECONDS: the "
                              "launcher counts this worker as gone (see the job's events in "
                              "`hvdrun status`)");
    }
    HVD_RETURN_IF_ERROR(s);
    ++g;
  }
}

std::string ElasticScope(const std::string& attempt_scope, int64_t g, int session) {
  return base::ElasticMeetingScope(attempt_scope, g, session);
}

Status DecideMeeting(rendezvous::Store& attempt_store, rendezvous::Store& meeting_store, int64_t g,
                     bool complete, std::chrono::milliseconds timeout, bool* decided,
                     bool* formed) {
  *decided = false;
  if (!complete) {
    HVD_RETURN_IF_ERROR(CheckNotFinished(attempt_store));
    std::string v;
    Status s = attempt_store.Get(base::ElasticGenerationKey(g + 1), &v);
    if (s.code() == StatusCode::kNotFound) return Status::OK();
    HVD_RETURN_IF_ERROR(s);
  }
  int64_t n = 0;
  HVD_RETURN_IF_ERROR(meeting_store.Add("decide", 1, &n));
  if (n == 1) HVD_RETURN_IF_ERROR(meeting_store.Set("outcome", complete ? "formed" : "superseded"));
  // The decider writes the outcome right after taking the counter; if it died in between, the
  // meeting cannot form (it is a member): count it as superseded, and look for the generation
  // the launcher publishes without it.
  constexpr std::chrono::milliseconds kOutcomeWait{10000};
  Status s = meeting_store.Wait({"outcome"}, std::min(timeout, kOutcomeWait));
  if (s.code() == StatusCode::kDeadlineExceeded) {
    HVD_LOG(WARNING) << "elastic generation " << g
                     << ": the rank that decided whether it formed wrote no outcome within "
                     << kOutcomeWait.count() / 1000 << " s (it died in between); meeting again";
    *decided = true;
    *formed = false;
    return Status::OK();
  }
  HVD_RETURN_IF_ERROR(s);
  std::string outcome;
  HVD_RETURN_IF_ERROR(meeting_store.Get("outcome", &outcome));
  *decided = true;
  *formed = outcome == "formed";
  return Status::OK();
}

std::vector<int>& FormedWith() {
  static auto* workers = new std::vector<int>();
  return *workers;
}

std::vector<int>& MetSinceFormed() {
  static auto* workers = new std::vector<int>();
  return *workers;
}

namespace {

// Whether the member at `index` of a meeting's members has written its host/ key there.
Status CameTo(rendezvous::Store& meeting_store, size_t index, bool* came) {
  std::string v;
  Status s =
      meeting_store.Get(base::RankKey(base::RankKeyKind::kHost, static_cast<int>(index)), &v);
  *came = s.ok();
  return s.code() == StatusCode::kNotFound ? Status::OK() : s;
}

}  // namespace

Status NoteWhoCame(rendezvous::Store& meeting_store, const Membership& membership) {
  std::vector<int>& met = MetSinceFormed();
  for (size_t r = 0; r < membership.workers.size(); ++r) {
    const int id = membership.workers[r];
    if (std::find(met.begin(), met.end(), id) != met.end()) continue;
    bool came = false;
    HVD_RETURN_IF_ERROR(CameTo(meeting_store, r, &came));
    if (came) met.push_back(id);
  }
  return Status::OK();
}

std::vector<int> ExpectedAtMeetings() {
  std::vector<int> all = FormedWith();
  for (int id : MetSinceFormed()) {
    if (std::find(all.begin(), all.end(), id) == all.end()) all.push_back(id);
  }
  return all;
}

AbsenceReporter::AbsenceReporter(rendezvous::Store* attempt_store, const Membership& membership,
                                 int worker_id, std::vector<int> ran_with,
                                 std::chrono::milliseconds after)
    : attempt_store_(attempt_store),
      membership_(membership),
      worker_id_(worker_id),
      ran_with_(ran_with.begin(), ran_with.end()),
      start_(Clock::now()),
      due_(start_ + after),
      interval_(std::min<std::chrono::milliseconds>(after, std::chrono::seconds(1))) {}

Status AbsenceReporter::Check(rendezvous::Store& meeting_store) {
  const auto now = Clock::now();
  if (ran_with_.empty() || now < due_ || now < next_check_) return Status::OK();
  // At most once a second (or per `after`, when shorter), and only the workers not seen yet:
  // every survivor of a large job waits here, and each check is a store request per worker.
  next_check_ = now + interval_;
  std::vector<int> missing;
  for (size_t r = 0; r < membership_.workers.size(); ++r) {
    const int id = membership_.workers[r];
    if (id == worker_id_ || !ran_with_.count(id) || arrived_.count(id)) continue;
    bool came = false;
    HVD_RETURN_IF_ERROR(CameTo(meeting_store, r, &came));
    if (came) {
      arrived_.insert(id);
    } else {
      missing.push_back(id);
    }
  }
  if (missing.empty() || missing == reported_) return Status::OK();
  const base::ElasticAbsence a{
      membership_.generation, missing,
      std::chrono::duration_cast<std::chrono::milliseconds>(now - start_).count()};
  HVD_LOG(WARNING) << "elastic generation " << membership_.generation << ": worker"
                   << (missing.size() == 1 ? " " : "s ") << base::FormatElasticWorkers(missing)
                   << " ran with this one but did not come back to re-form within "
                      "HVD_PEER_TIMEOUT_SECONDS; asking the launcher to remove "
                   << (missing.size() == 1 ? "it" : "them");
  HVD_RETURN_IF_ERROR(attempt_store_->Set(base::RankKey(base::RankKeyKind::kAbsent, worker_id_),
                                          base::FormatElasticAbsence(a)));
  reported_ = missing;  // only once written: a failed write is tried again at the next check
  return Status::OK();
}

Status NoteCommitted(rendezvous::Store& attempt_store, const Membership& membership) {
  if (membership.rank < 0 || membership.rank >= static_cast<int>(membership.workers.size())) {
    return FailedPrecondition("no membership to note a commit for");
  }
  const int worker = membership.workers[membership.rank];
  Status s = attempt_store.Set(base::RankKey(base::RankKeyKind::kCommitted, worker),
                               std::to_string(membership.generation));
  if (!s.ok()) {
    HVD_LOG(WARNING) << "telling the launcher that worker " << worker
                     << " holds the training state: " << s.message()
                     << " (tried again at the next commit)";
  }
  return s;
}

bool OnlyRemoved(const std::vector<int>& current, const std::vector<int>& newer) {
  const std::set<int> had(current.begin(), current.end());
  for (int w : newer) {
    if (!had.count(w)) return false;
  }
  return newer.size() < current.size();
}

}  // namespace hvd::runtime::core
