#include "launcherd/launcher_service.h"

#include <csignal>

#include "control/grpc_util.h"
#include "control/job_state_proto.h"
#include "control/spec_limits.h"
#include "control/text.h"
#include "launcherd/proto_convert.h"
#include "launcherd/stdin_service.h"

namespace hvd::launcherd {
namespace {

// How often a watch with nothing to send checks whether its client went away.
constexpr auto kWatchPoll = std::chrono::milliseconds(200);

// ListJobs pages: jobs per page by default and at most, and the bytes after which a page ends
// early (a quarter of the 4 MiB a default gRPC client accepts; summaries are a few KiB at most).
constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;
constexpr size_t kMaxPageBytes = 1 << 20;

// Page tokens are "<submit_time_ms>-<job id>" of the page's last job: the id resumes after it,
// the time when it has been pruned since. Opaque to clients.
std::string PageToken(const JobStatus& last) {
  return std::to_string(last.submit_time_ms) + "-" + last.id;
}
bool ParsePageToken(const std::string& token, int64_t* ms, std::string* id) {
  const size_t dash = token.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 19 || dash + 1 == token.size()) {
    return false;
  }
  int64_t v = 0;
  for (size_t i = 0; i < dash; ++i) {
    if (token[i] < '0' || token[i] > '9') return false;
    v = v * 10 + (token[i] - '0');
  }
  *ms = v;
  *id = token.substr(dash + 1);
  return id->size() <= 64;
}

}  // namespace

grpc::Status LauncherService::SubmitJob(grpc::ServerContext* context,
                                        const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  // Every field against hvdrun's own limits before anything is copied or placed
  // (control/spec_limits.h): a client that skips hvdrun gets the same answer.
  Status valid = control::ValidateJobSpec(request->spec());
  if (!valid.ok()) return control::ToGrpc(valid.WithContext("SubmitJob"));
  std::string id;
  Status s = jobs_->Submit(FromProto(request->spec()), &id);
  if (!s.ok()) return control::ToGrpc(s.WithContext("SubmitJob"));
  response->set_job_id(id);
  return grpc::Status::OK;
}

grpc::Status LauncherService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                     v1::JobStatus* response) {
  std::shared_ptr<const JobStatus> status;
  Status s = jobs_->GetPublished(request->job_id(), &status);
  if (!s.ok()) return control::ToGrpc(s);
  ToProto(*status, response);
  return grpc::Status::OK;
}

grpc::Status LauncherService::ListJobs(grpc::ServerContext* context,
                                       const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  int64_t after_ms = 0;
  std::string after_id;
  if (!request->page_token().empty() &&
      !ParsePageToken(request->page_token(), &after_ms, &after_id)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ListJobs: page_token is not one this launcher gave; start again with an "
                        "empty page_token");
  }
  if (request->page_size() < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "ListJobs: page_size must be >= 0 (0: the default of " +
                            std::to_string(kDefaultPageSize) + ")");
  }
  const int limit =
      request->page_size() == 0 ? kDefaultPageSize : std::min(request->page_size(), kMaxPageSize);
  size_t bytes = 0;
  std::string last_token;
  bool more = false;
  // From the published snapshot (jobs_snapshot.h), as JobManager::ListPage pages the table.
  const std::shared_ptr<const JobsSnapshot> snap = jobs_->Snapshot();
  const auto& jobs = snap->summaries;
  size_t i = 0;
  if (!after_id.empty()) {
    while (i < jobs.size() && jobs[i]->id != after_id) ++i;
    if (i < jobs.size()) {
      ++i;
    } else {  // pruned since the last page: resume by time
      i = 0;
      while (i < jobs.size() && jobs[i]->submit_time_ms <= after_ms) ++i;
    }
  }
  for (; i < jobs.size(); ++i) {
    if (response->jobs_size() >= limit || bytes >= kMaxPageBytes) {
      more = true;
      break;
    }
    v1::JobStatus* p = response->add_jobs();
    ToSummaryProto(*jobs[i], p);
    bytes += p->ByteSizeLong();
    last_token = PageToken(*jobs[i]);
  }
  if (more) response->set_next_page_token(last_token);
  return grpc::Status::OK;
}

grpc::Status LauncherService::CancelJob(grpc::ServerContext* context,
                                        const v1::CancelJobRequest* request,
                                        v1::CancelJobResponse* response) {
  const int sig = request->signal();
  if (sig != 0 && sig != SIGINT && sig != SIGTERM && sig != SIGHUP && sig != SIGKILL) {
    return control::ToGrpc(InvalidArgument(
        "CancelJob signal " + std::to_string(sig) + ": give 0 (SIGTERM), SIGINT (" +
        std::to_string(SIGINT) + "), SIGTERM (" + std::to_string(SIGTERM) + "), SIGHUP (" +
        std::to_string(SIGHUP) + ") or SIGKILL (" + std::to_string(SIGKILL) + ")"));
  }
  JobState state;
  Status s = jobs_->Cancel(request->job_id(), request->reason(), &state, sig);
  if (!s.ok()) return control::ToGrpc(s);
  response->set_state(control::JobStateToProto(state));
  return grpc::Status::OK;
}

grpc::Status LauncherService::DumpStacks(grpc::ServerContext* context,
                                         const v1::DumpStacksRequest* request,
                                         v1::DumpStacksResponse* response) {
  // The reason only goes to the agents' logs: a long one is cut, not refused.
  std::string why = request->reason().empty() ? "asked by a client" : request->reason();
  if (why.size() > 200) why = std::string(control::Utf8Prefix(why, 200)) + "...";
  std::vector<int> asked;
  Status s = jobs_->DumpStacks(request->job_id(),
                               {request->ranks().begin(), request->ranks().end()}, why, &asked);
  if (!s.ok()) return control::ToGrpc(s);
  for (int r : asked) response->add_ranks(r);
  return grpc::Status::OK;
}

grpc::Status LauncherService::UpdateJobHosts(grpc::ServerContext* context,
                                             const v1::UpdateJobHostsRequest* request,
                                             v1::UpdateJobHostsResponse* response) {
  std::vector<control::HostRequest> hosts;
  for (const v1::HostSlots& h : request->hosts()) hosts.push_back({h.host(), h.slots()});
  return control::ToGrpc(jobs_->UpdateHosts(request->job_id(), hosts));
}

grpc::Status LauncherService::WatchJob(grpc::ServerContext* context,
                                       const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  WatchCursor cursor;
  bool done = false;
  // An attached client keeps its job alive while it watches (JobManager::Tick).
  struct Attachment {
    JobManager* jobs;
    std::string id;
    ~Attachment() {
      if (jobs != nullptr) jobs->WatchEnded(id);
    }
  } attachment{request->attach() && request->follow() ? jobs_ : nullptr, request->job_id()};
  if (attachment.jobs != nullptr) jobs_->WatchStarted(request->job_id());
  // Ends when the job finished (done), the client went away, or the launcher stops (done too).
  while (!done) {
    if (context->IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "WatchJob: the client went away");
    }
    std::vector<JobEvent> events;
    Status s = jobs_->NextEvents(request->job_id(), request->from_seq(), request->follow(),
                                 kWatchPoll, &cursor, &events, &done);
    if (!s.ok()) return control::ToGrpc(s);
    for (const JobEvent& e : events) {
      v1::JobEvent p;
      ToProto(e, &p);
      // No buffer hint: the synchronous Write returns only once its message went out, and a
      // hinted one waited for gRPC's own flush, about 10 s later (every `hvdrun logs`, and an
      // attached run's output and end now and then).
      if (!writer->Write(p)) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "WatchJob: the client went away");
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status LauncherService::ListAgents(grpc::ServerContext* context,
                                         const v1::ListAgentsRequest* request,
                                         v1::ListAgentsResponse* response) {
  for (const AgentInfo& a : AgentsWithSlotsInUse(*agents_, *jobs_)) {
    ToProto(a, response->add_agents());
  }
  return grpc::Status::OK;
}

grpc::Status LauncherService::WriteStdin(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::StdinData>* reader,
                                         v1::WriteStdinResponse* response) {
  return ServeWriteStdin(jobs_, context, reader);
}

}  // namespace hvd::launcherd
