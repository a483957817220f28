#include "launcherd/launcher_service.h"

#include "control/grpc_util.h"
#include "launcherd/proto_convert.h"
#include "launcherd/stdin_service.h"

namespace hvd::launcherd {
namespace {

// How often a watch with nothing to send checks whether its client went away.
constexpr auto kWatchPoll = std::chrono::milliseconds(200);

}  // namespace

grpc::Status LauncherService::SubmitJob(grpc::ServerContext* context,
                                        const v1::SubmitJobRequest* request,
                                        v1::SubmitJobResponse* response) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  std::string id;
  Status s = jobs_->Submit(FromProto(request->spec()), &id);
  if (!s.ok()) return control::ToGrpc(s.WithContext("SubmitJob"));
  response->set_job_id(id);
  return grpc::Status::OK;
}

grpc::Status LauncherService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                     v1::JobStatus* response) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  JobStatus status;
  Status s = jobs_->Get(request->job_id(), &status);
  if (!s.ok()) return control::ToGrpc(s);
  ToProto(status, response);
  return grpc::Status::OK;
}

grpc::Status LauncherService::ListJobs(grpc::ServerContext* context,
                                       const v1::ListJobsRequest* request,
                                       v1::ListJobsResponse* response) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  for (const JobStatus& status : jobs_->List()) ToProto(status, response->add_jobs());
  return grpc::Status::OK;
}

grpc::Status LauncherService::CancelJob(grpc::ServerContext* context,
                                        const v1::CancelJobRequest* request,
                                        v1::CancelJobResponse* response) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  JobState state;
  Status s = jobs_->Cancel(request->job_id(), request->reason(), &state);
  if (!s.ok()) return control::ToGrpc(s);
  response->set_state(static_cast<v1::JobState>(state));
  return grpc::Status::OK;
}

grpc::Status LauncherService::WatchJob(grpc::ServerContext* context,
                                       const v1::WatchJobRequest* request,
                                       grpc::ServerWriter<v1::JobEvent>* writer) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
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
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  for (const AgentInfo& a : AgentsWithSlotsInUse(*agents_, *jobs_)) {
    ToProto(a, response->add_agents());
  }
  return grpc::Status::OK;
}

grpc::Status LauncherService::WriteStdin(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::StdinData>* reader,
                                         v1::WriteStdinResponse* response) {
  grpc::Status auth = control::CheckToken(*context, token_);
  if (!auth.ok()) return auth;
  return ServeWriteStdin(jobs_, context, reader);
}

}  // namespace hvd::launcherd
