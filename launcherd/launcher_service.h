// hvd.v1.Launcher: what hvdrun asks of the launcher. Thin: translates between protobuf and
// JobManager's domain calls. The cluster token is checked before any of these runs, by the
// server's token gate (control/token_gate.h, launcher.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

#include "hvd/v1/launcher.grpc.pb.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job_manager.h"

namespace hvd::launcherd {

class LauncherService final : public v1::Launcher::Service {
 public:
  // `jobs` and `agents` must outlive the service.
  LauncherService(JobManager* jobs, const AgentRegistry* agents) : jobs_(jobs), agents_(agents) {}

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::JobStatus* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status DumpStacks(grpc::ServerContext* context, const v1::DumpStacksRequest* request,
                          v1::DumpStacksResponse* response) override;
  grpc::Status UpdateJobHosts(grpc::ServerContext* context,
                              const v1::UpdateJobHostsRequest* request,
                              v1::UpdateJobHostsResponse* response) override;
  // Streams the current status, the output from from_seq, then (with follow) new output, progress
  // and status changes until the job has finished; the last event is the final JobStatus. Holds a
  // gRPC thread for the watch's life.
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListAgents(grpc::ServerContext* context, const v1::ListAgentsRequest* request,
                          v1::ListAgentsResponse* response) override;
  // hvdrun's standard input for the job's stdin rank (stdin_service.h).
  grpc::Status WriteStdin(grpc::ServerContext* context, grpc::ServerReader<v1::StdinData>* reader,
                          v1::WriteStdinResponse* response) override;

 private:
  JobManager* const jobs_;
  const AgentRegistry* const agents_;
};

}  // namespace hvd::launcherd
