#include "core/context.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <set>

#include "base/logging.h"
#include "base/net.h"
#include "base/rendezvous_keys.h"
#include "base/settings.h"
#include "core/elastic.h"
#include "core/horovod_env.h"
#include "core/job_settings.h"
#include "core/process_set_table.h"
#include "core/topology_settings.h"
#include "fusion/fusion_settings.h"
#include "negotiation/exchange.h"
#include "negotiation/response_cache.h"
#include "stall/watched_transport.h"

namespace hvd::runtime::core {
namespace {

using base::kSameOnEveryRank;
using base::Setting;

// Identity and rendezvous: set by hvdrun/hvd-agent for every rank.
const Setting<std::string> kRendezvous(
    "HVD_RENDEZVOUS", nullptr, "",
    "where ranks meet: hvd://HOST:PORT or, over TLS, hvds://HOST:PORT (hvdrun and hvd-agent set "
    "it), or file:///shared/dir");
const Setting<std::string> kJobId(
    "HVD_JOB_ID", nullptr, "local",
    "job id; scopes rendezvous keys so jobs sharing a store never mix");
const Setting<int64_t> kAttempt("HVD_ATTEMPT", nullptr, 0,
                                "restart attempt; scopes rendezvous keys so a restart never reads "
                                "the previous attempt's");
const Setting<std::string> kHostname("HVD_HOSTNAME", nullptr, "",
                                     "host identity for local/cross ranks; unset: gethostname()");
// Above 0 (a wait with no time at all fails at once); at most a year.
constexpr base::Range<double> kTimeoutRange{0.001, 365 * 24 * 3600.0,
                                            "give seconds above 0, or unset it for the default"};
const Setting<double> kStartTimeout("HVD_START_TIMEOUT_SECONDS", nullptr, 60,
                                    "how long Init() waits for every rank to arrive and connect",
                                    kTimeoutRange);
const Setting<double> kPeerTimeout("HVD_PEER_TIMEOUT_SECONDS", nullptr, 60,
                                   "a peer that moves no byte for this long while a collective or "
                                   "negotiation waits on it fails the job, naming it",
                                   kTimeoutRange);
const Setting<double> kShutdownTimeout("HVD_SHUTDOWN_TIMEOUT_SECONDS", nullptr, 10,
                                       "how long Shutdown() waits for the other ranks to stop "
                                       "together before closing the links anyway",
                                       kTimeoutRange);

const Setting<double> kNcclTimeout("HVD_NCCL_TIMEOUT_SECONDS", nullptr, 60,
                                   "how long a process set's NCCL communicator may take to form "
                                   "(unique id through the store, then ncclCommInitRank) before "
                                   "the job fails naming the ranks that did not arrive",
                                   {0.1, 86400});

// The engine (the fusion settings are fusion/fusion_settings.cc's).
const Setting<double> kCycleTime("HVD_CYCLE_TIME", "HOROVOD_CYCLE_TIME", 1.0,
                                 "milliseconds between negotiation cycles", {0, 60000});
const Setting<bool> kRunOnCaller("HVD_RUN_ON_CALLER", nullptr, true,
                                 "the thread waiting for a synchronous operation on host "
                                 "memory runs the negotiation rounds and collectives itself "
                                 "instead of handing them to the background thread and back "
                                 "(0: always the background thread)");
const Setting<int64_t> kEagerMax(
    "HVD_EAGER_ALLREDUCE_MAX_BYTES", nullptr, 64 << 10,
    "an allreduce found in the response cache and alone in its round sends its data with the "
    "ready bits when at most this size (one message latency instead of two); 0: never",
    {0, negotiation::kMaxRiderBytes});
const Setting<int64_t> kCacheCapacity("HVD_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY",
                                      negotiation::kDefaultCacheCapacity,
                                      "response cache entries; 0 disables the cache",
                                      {0, base::kMaxCacheCapacity}, kSameOnEveryRank);
const Setting<std::string> kTimeline("HVD_TIMELINE", "HOROVOD_TIMELINE", "",
                                     "write a Chrome trace of every tensor to this file (rank 0); "
                                     "DYNAMIC: nothing until start_timeline()");
const Setting<bool> kTimelineMarkCycles("HVD_TIMELINE_MARK_CYCLES", "HOROVOD_TIMELINE_MARK_CYCLES",
                                        false,
                                        "mark every negotiation cycle in a timeline started at "
                                        "init (start_timeline() takes its own flag)");
// 0 turns them off; at most a year.
constexpr base::Range<double> kStallRange{0, 365 * 24 * 3600.0,
                                          "give seconds, 0 to turn it off, or unset it for the "
                                          "default"};
const Setting<double> kStallCheck("HVD_STALL_CHECK_TIME_SECONDS",
                                  "HOROVOD_STALL_CHECK_TIME_SECONDS", 60,
                                  "warn when ranks wait this long for a tensor others submitted; "
                                  "0 disables",
                                  kStallRange);
const Setting<double> kStallShutdown("HVD_STALL_SHUTDOWN_TIME_SECONDS",
                                     "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0,
                                     "fail a tensor stalled this long on every rank; 0: never",
                                     kStallRange);

const Setting<std::string> kProcessSets(
    "HVD_PROCESS_SETS", nullptr, "",
    "process sets registered at init, ids 1, 2, ... in order: sets separated by ';', ranks by "
    "',' (e.g. '0,1;2,3')");
const Setting<bool> kDynamicProcessSets(
    "HVD_DYNAMIC_PROCESS_SETS", "HOROVOD_DYNAMIC_PROCESS_SETS", false,
    "allow adding and removing process sets after init (collective over the whole job)");

// Create() calls so far in this process (hvd::Init() serializes them). The n-th call meets the
// other ranks' n-th under keys of its own, so a new session never reads a previous one's
// addresses, whether that one succeeded or failed half way.
int g_incarnation = 0;

template <typename T>
Status Read(const Setting<T>& s, T* out) {
  return s.Get(out);
}

// NCCL's breadcrumbs: every value the environment set, so that a user sees what took effect.
// Settings every rank must agree on are logged by rank 0 alone (Init compares them across ranks);
// the others by every rank, where they may differ.
void LogSettingsFromEnvironment(int64_t rank) {
  for (const base::SettingFromEnv& s : base::SettingsFromEnvironment()) {
    if (rank != 0 && (s.flags & kSameOnEveryRank) != 0) continue;
    HVD_LOG(INFO) << s.Breadcrumb();
  }
}

// Publishes this rank's size, host and job-wide settings (job_settings.h) and collects
// everybody's, naming the ranks that never arrive and any that disagree.
// An elastic meeting waits in slices and gives up, as every rank does, when the launcher
// superseded its generation (elastic.h).
struct ElasticMeeting {
  rendezvous::Store* attempt_store = nullptr;
  int64_t generation = 0;
  AbsenceReporter* absence = nullptr;  // null: nobody reads reports (a file store)
  bool superseded = false;             // out
};

// Waits for `keys` until `timeout`, or, elastic, until the generation formed or was superseded.
Status WaitForRanks(rendezvous::Store& store, const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout, ElasticMeeting* elastic) {
  if (!elastic) return store.Wait(keys, timeout);
  // Short slices first: a survivor that re-joins before the launcher published the generation
  // without the dead worker (a few ms later) moves on at once; then up to 100 ms, so that a long
  // wait (for workers that move at their next commit) costs the launcher 10 requests a second.
  std::chrono::milliseconds slice{5};
  constexpr std::chrono::milliseconds kMaxSlice{100};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;; slice = std::min(slice * 2, kMaxSlice)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    Status s = store.Wait(keys, std::max(std::chrono::milliseconds(1), std::min(slice, left)));
    if (!s.ok() && s.code() != StatusCode::kDeadlineExceeded) return s;
    bool decided = false, formed = false;
    HVD_RETURN_IF_ERROR(DecideMeeting(*elastic->attempt_store, store, elastic->generation, s.ok(),
                                      timeout, &decided, &formed));
    if (decided) {
      elastic->superseded = !formed;
      return Status::OK();
    }
    if (left.count() <= 0) return s;
    if (elastic->absence != nullptr) {
      // Not fatal: the wait goes on as it would without the report.
      Status a = elastic->absence->Check(store);
      if (!a.ok()) {
        HVD_LOG(WARNING) << "reporting absent elastic workers: " << a.message();
      }
    }
  }
}

Status MeetEveryone(rendezvous::Store& store, int rank, int size, const std::string& host,
                    const std::string& extra_settings, std::chrono::milliseconds timeout,
                    ElasticMeeting* elastic, std::vector<std::string>* hosts) {
  std::string settings;
  HVD_RETURN_IF_ERROR(JobWideSettings(&settings));
  settings += " " + extra_settings;
  const std::string mine = std::to_string(size) + "\n" + host + "\n" + settings;
  HVD_RETURN_IF_ERROR_CTX(store.Set(base::RankKey(base::RankKeyKind::kHost, rank), mine),
                          "rendezvous in " + store.Describe());
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(base::RankKey(base::RankKeyKind::kHost, r));
  Status s = WaitForRanks(store, keys, timeout, elastic);
  if (s.ok() && elastic && elastic->superseded) return Status::OK();
  if (s.code() == StatusCode::kDeadlineExceeded) {
    std::string missing;
    int n = 0;
    for (int r = 0; r < size; ++r) {
      std::string v;
      if (!store.Get(keys[r], &v).ok()) {
        missing += (n++ ? ", " : "") + std::to_string(r);
      }
    }
    return DeadlineExceeded("rendezvous in " + store.Describe() + ": rank" + (n == 1 ? " " : "s ") +
                            missing + " of " + std::to_string(size) + " did not arrive within " +
                            std::to_string(timeout.count() / 1000) +
                            (elastic ? " s (HVD_ELASTIC_TIMEOUT_SECONDS) in elastic generation " +
                                           std::to_string(elastic->generation) +
                                           "; the launcher publishes a new generation when a "
                                           "worker leaves"
                                     : " s (HVD_START_TIMEOUT_SECONDS). Are they running, with "
                                       "the same HVD_RENDEZVOUS, HVD_JOB_ID and HVD_SIZE? (This "
                                       "is hvd::Init() call " +
                                           std::to_string(g_incarnation + 1) +
                                           " of this process; ranks meet the others' call of "
                                           "the same number.)"));
  }
  HVD_RETURN_IF_ERROR_CTX(s, "rendezvous in " + store.Describe());
  hosts->resize(size);
  for (int r = 0; r < size; ++r) {
    std::string v;
    HVD_RETURN_IF_ERROR_CTX(store.Get(keys[r], &v), "rendezvous in " + store.Describe());
    auto nl = v.find('\n');
    std::string their_size = v.substr(0, nl);
    if (nl == std::string::npos || their_size != std::to_string(size)) {
      return InvalidArgument("rank " + std::to_string(r) + " was started with HVD_SIZE=" +
                             their_size + " but rank " + std::to_string(rank) + " with " +
                             std::to_string(size) + "; every rank of a job needs the same size");
    }
    const auto nl2 = v.find('\n', nl + 1);
    if (nl2 == std::string::npos) {
      return InvalidArgument("rank " + std::to_string(r) + " published no job settings in " +
                             store.Describe() + " (a different hvd version?)");
    }
    (*hosts)[r] = v.substr(nl + 1, nl2 - nl - 1);
    HVD_RETURN_IF_ERROR(CompareJobWideSettings(settings, rank, v.substr(nl2 + 1), r));
  }
  return Status::OK();
}

// Process sets: HVD_PROCESS_SETS first, then the caller's; every rank must register the same.
Status InitProcessSets(const InitOptions& options, int size, std::vector<std::vector<int>>* out) {
  std::string sets_text;
  HVD_RETURN_IF_ERROR(Read(kProcessSets, &sets_text));
  std::vector<std::vector<int>> sets;
  HVD_RETURN_IF_ERROR(ParseProcessSets(sets_text, &sets));
  sets.insert(sets.end(), options.process_sets.begin(), options.process_sets.end());
  for (auto& set : sets) {
    std::vector<int> sorted;
    HVD_RETURN_IF_ERROR_CTX(ValidateProcessSetRanks(set, size, &sorted),
                            "process sets given at init");
    // A set whose ranks are registered already (the global set's, or an earlier entry's) is that
    // set, as in Horovod, whose ProcessSet objects find their id by their ranks.
    if (static_cast<int>(sorted.size()) == size ||
        std::find(out->begin(), out->end(), sorted) != out->end()) {
      continue;
    }
    out->push_back(std::move(sorted));
  }
  return Status::OK();
}

}  // namespace

Status Context::Create(const InitOptions& options, std::unique_ptr<Context>* out) {
  // An elastic worker whose meeting formed but whose connections to its members then failed (one
  // hung or died in between) meets them again in a new session, as after a failed collective:
  // a member that never comes is reported absent and removed (elastic.h, AbsenceReporter).
  // Failing here instead would end a healthy worker (hvd.elastic.run re-raises Init's errors).
  constexpr int kMaxConnectRetries = 16;
  Status s;
  for (int tries = 1;; ++tries) {
    bool formed = false;
    s = CreateOnce(options, out, &formed);
    const StatusCode c = s.code();
    if (s.ok() || !formed || tries >= kMaxConnectRetries ||
        (c != StatusCode::kDeadlineExceeded && c != StatusCode::kUnavailable &&
         c != StatusCode::kAborted)) {
      break;
    }
    HVD_LOG(WARNING) << "elastic: connecting to the members of the meeting failed (" << s.message()
                     << "); meeting them again";
  }
  ++g_incarnation;
  return s;
}

Status Context::CreateOnce(const InitOptions& options, std::unique_ptr<Context>* out,
                           bool* formed) {
  std::unique_ptr<Context> ctx(new Context());
  HVD_RETURN_IF_ERROR(base::CheckLogLevel());
  ElasticSettings elastic;
  HVD_RETURN_IF_ERROR(ReadElasticSettings(&elastic));
  int64_t rank = options.rank, size = options.size;
  if (elastic.enabled) {
    if (rank >= 0 || size >= 0) {
      return InvalidArgument(
          "an elastic worker (HVD_ELASTIC=1) takes its rank and size from the "
          "launcher's membership, not from InitOptions");
    }
    rank = 0;  // until the membership says
    size = 1;
  } else {
    HVD_RETURN_IF_ERROR(ReadRankAndSize(&rank, &size));
  }
  base::SetLogRank(static_cast<int>(rank));
  LogSettingsFromEnvironment(rank);
  for (const std::string& w : UnimplementedHorovodVariables()) HVD_LOG(WARNING) << w;

  EngineOptions eo;
  double cycle_ms, start_s, peer_s, shutdown_s;
  int64_t cache_capacity, eager_max;
  std::string timeline_path;
  HVD_RETURN_IF_ERROR(Read(kCycleTime, &cycle_ms));
  HVD_RETURN_IF_ERROR(Read(kRunOnCaller, &eo.run_on_caller));
  HVD_RETURN_IF_ERROR(fusion::ReadFusionLimits(&eo.fusion));
  HVD_RETURN_IF_ERROR(Read(kCacheCapacity, &cache_capacity));
  HVD_RETURN_IF_ERROR(Read(kEagerMax, &eager_max));
  HVD_RETURN_IF_ERROR(Read(kStallCheck, &eo.stall_check_seconds));
  HVD_RETURN_IF_ERROR(Read(kStallShutdown, &eo.stall_shutdown_seconds));
  HVD_RETURN_IF_ERROR(Read(kTimeline, &timeline_path));
  HVD_RETURN_IF_ERROR(Read(kStartTimeout, &start_s));
  HVD_RETURN_IF_ERROR(Read(kPeerTimeout, &peer_s));
  // Read here, not at Shutdown(): a bad value is Init's error, not a warning at the end.
  HVD_RETURN_IF_ERROR(Read(kShutdownTimeout, &shutdown_s));
  ctx->shutdown_s_ = shutdown_s;
  eo.cycle_time = std::chrono::microseconds(static_cast<int64_t>(cycle_ms * 1000));
  eo.cache_capacity = static_cast<uint32_t>(cache_capacity);
  eo.eager_max_bytes = static_cast<uint32_t>(eager_max);
  const auto start_timeout = std::chrono::milliseconds(static_cast<int64_t>(start_s * 1000));

  // Meet the others.
  std::string url = options.rendezvous;
  if (url.empty()) HVD_RETURN_IF_ERROR(Read(kRendezvous, &url));
  if (url.empty()) {
    if (size > 1 || elastic.enabled) {
      return InvalidArgument(
          (elastic.enabled ? std::string("HVD_ELASTIC=1") : "HVD_SIZE=" + std::to_string(size)) +
          " but HVD_RENDEZVOUS is not set: set it to a directory every rank "
          "can reach (file:///path/to/dir), or start the job with hvdrun");
    }
    ctx->base_store_ = rendezvous::NewMemoryStore();
  } else {
    HVD_RETURN_IF_ERROR_CTX(rendezvous::OpenStore(url, &ctx->base_store_), "HVD_RENDEZVOUS");
  }
  std::string job;
  int64_t attempt;
  HVD_RETURN_IF_ERROR(Read(kJobId, &job));
  HVD_RETURN_IF_ERROR(Read(kAttempt, &attempt));
  const std::string attempt_scope = base::AttemptScope(job, attempt);
  std::string host;
  HVD_RETURN_IF_ERROR(Read(kHostname, &host));
  if (host.empty()) host = base::LocalHostName();
  HVD_RETURN_IF_ERROR(Read(kDynamicProcessSets, &eo.dynamic_process_sets));
  eo.dynamic_process_sets = eo.dynamic_process_sets || options.dynamic_process_sets;
  std::vector<std::string> hosts;
  if (elastic.enabled) {
    ctx->elastic_ = true;
    eo.elastic = true;
    ctx->attempt_store_ = rendezvous::NewPrefixStore(attempt_scope, ctx->base_store_.get());
  }
  // An elastic worker joins the newest membership naming it, and again when the launcher
  // supersedes it while the ranks wait for each other (elastic.h); a fixed job meets once.
  const auto deadline = std::chrono::steady_clock::now() + elastic.timeout;
  for (;;) {
    std::string scope = attempt_scope;
    ElasticMeeting meeting;
    std::optional<AbsenceReporter> absence;
    if (elastic.enabled) {
      HVD_RETURN_IF_ERROR_CTX(
          FindMembership(*ctx->attempt_store_, elastic.worker_id, deadline, &ctx->membership_),
          "elastic worker " + std::to_string(elastic.worker_id));
      rank = ctx->membership_.rank;
      size = static_cast<int64_t>(ctx->membership_.workers.size());
      base::SetLogRank(static_cast<int>(rank));
      scope = ElasticScope(attempt_scope, ctx->membership_.generation, ctx->membership_.session);
      meeting.attempt_store = ctx->attempt_store_.get();
      meeting.generation = ctx->membership_.generation;
      if (url.rfind("hvd://", 0) == 0 || url.rfind("hvds://", 0) == 0) {
        absence.emplace(ctx->attempt_store_.get(), ctx->membership_, elastic.worker_id,
                        ExpectedAtMeetings(),
                        std::chrono::milliseconds(static_cast<int64_t>(peer_s * 1000)));
        meeting.absence = &*absence;
      }
    } else if (g_incarnation > 0) {
      // The n-th successful Init() of a process (after n Shutdown()s) meets the other ranks' n-th
      // under its own keys: otherwise it would read the previous incarnation's host and address
      // entries (and dial a closed port until HVD_START_TIMEOUT_SECONDS).
      scope = base::IncarnationScope(scope, g_incarnation);
    }
    ctx->store_ = rendezvous::NewPrefixStore(scope, ctx->base_store_.get());
    eo.process_sets.clear();
    HVD_RETURN_IF_ERROR(InitProcessSets(options, static_cast<int>(size), &eo.process_sets));
    const std::string extra = "process_sets=" + FormatProcessSets(eo.process_sets) +
                              " dynamic_process_sets=" + (eo.dynamic_process_sets ? "1" : "0");
    const auto meet_timeout = elastic.enabled
                                  ? std::max(std::chrono::milliseconds(1),
                                             std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now()))
                                  : start_timeout;
    HVD_RETURN_IF_ERROR(MeetEveryone(*ctx->store_, static_cast<int>(rank), static_cast<int>(size),
                                     host, extra, meet_timeout,
                                     elastic.enabled ? &meeting : nullptr, &hosts));
    if (!meeting.superseded) break;
    HVD_LOG(INFO) << "elastic generation " << meeting.generation
                  << " was superseded while its ranks met; joining the newer one";
    // Who came to it is expected at the next meeting too (AbsenceReporter).
    Status noted = NoteWhoCame(*ctx->store_, ctx->membership_);
    if (!noted.ok()) {
      HVD_LOG(WARNING) << "elastic: reading who came to a meeting: " << noted.ToString();
    }
  }
  if (elastic.enabled) {
    *formed = true;
    FormedWith() = ctx->membership_.workers;
    MetSinceFormed().clear();
    HVD_LOG(INFO) << "elastic worker " << elastic.worker_id << " joined generation "
                  << ctx->membership_.generation << " as rank " << rank << " of " << size
                  << " (workers " << base::FormatElasticWorkers(ctx->membership_.workers) << ")";
  }
  ctx->topology_ = ComputeTopology(static_cast<int>(rank), hosts);
  // Explicit topology from the launcher wins over derivation; an elastic worker's changes with
  // its membership, so it is always derived, and so is a session whose caller gave its own rank
  // and size (InitOptions): the launcher's numbers in its environment are another job's.
  const bool own_shape = options.rank >= 0 || options.size >= 0;
  if (!elastic.enabled && !own_shape) {
    HVD_RETURN_IF_ERROR(ReadTopologyOverrides(&ctx->topology_));
  }

  // Under hvd-launcherd, stalls and peer failures are reported to it (stall_reporter.h); a file
  // store has nobody to read them.
  TransportWrap wrap;
  if (url.rfind("hvd://", 0) == 0 || url.rfind("hvds://", 0) == 0) {
    stall::StallReporter::Options so;
    so.rank = static_cast<int>(rank);
    // The launcher knows an elastic worker by its id, whatever its rank in this generation.
    if (elastic.enabled) so.worker_ids = ctx->membership_.workers;
    so.hosts = hosts;
    so.check_seconds = eo.stall_check_seconds;
    so.url = url;
    so.scope = attempt_scope;
    ctx->stall_reporter_ = std::make_unique<stall::StallReporter>(so, ctx->base_store_.get());
    eo.stall_reporter = ctx->stall_reporter_.get();
    wrap = [reporter = ctx->stall_reporter_.get()](std::unique_ptr<transport::Transport> t) {
      return stall::WatchWaits(std::move(t), reporter);
    };
  }
  collectives::Comm comm;
  comm.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(peer_s * 1000));
  HVD_RETURN_IF_ERROR(ConnectComm(*ctx->store_, static_cast<int>(rank), static_cast<int>(size),
                                  hosts, start_timeout, wrap, &ctx->transport_, &comm));

  // The timeline exists for the engine's life (start_timeline() may come later); rank 0 writes.
  std::unique_ptr<timeline::Timeline> tl = timeline::Timeline::Create(rank == 0);
  const timeline::TimelineSetting ts = timeline::ParseTimelineSetting(timeline_path);
  if (!ts.path.empty()) {
    bool mark_cycles = false;
    HVD_RETURN_IF_ERROR(Read(kTimelineMarkCycles, &mark_cycles));
    HVD_RETURN_IF_ERROR_CTX(tl->Start(ts.path, mark_cycles), "HVD_TIMELINE");
  }
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    if (hosts[r] == hosts[rank]) eo.host_ranks.push_back(r);
  }
  double nccl_s;
  HVD_RETURN_IF_ERROR(Read(kNcclTimeout, &nccl_s));
  eo.gpu.store = ctx->store_.get();
  eo.gpu.hosts = hosts;
  eo.gpu.nccl_timeout = std::chrono::milliseconds(static_cast<int64_t>(nccl_s * 1000));
  HVD_RETURN_IF_ERROR(GpuHierarchicalRequested(&eo.gpu.hierarchical));
  ctx->engine_ = std::make_unique<Engine>(comm, eo, std::move(tl));
  ctx->engine_->Start();
  HVD_LOG(INFO) << "initialized: rank " << rank << " of " << size << ", local "
                << ctx->topology_.local_rank << " of " << ctx->topology_.local_size << " on "
                << host;
  *out = std::move(ctx);
  return Status::OK();
}

Status Context::Shutdown() {
  return engine_->Stop(std::chrono::milliseconds(static_cast<int64_t>(shutdown_s_ * 1000)));
}

Context::~Context() {
  // The engine must stop before the transport it uses is destroyed, and the transport before the
  // stall reporter it tells of its waits.
  engine_.reset();
  transport_.reset();
  stall_reporter_.reset();
}

}  // namespace hvd::runtime::core
