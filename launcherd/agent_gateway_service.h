// hvd.v1.AgentGateway: one long-lived bidirectional stream per agent. Thin: checks the token,
// requires AgentInfo first, answers RegisterAck, then feeds heartbeats, rank events and output to
// AgentRegistry and JobManager. Commands (StartRank, StopJob) reach the stream through an
// AgentLink whose outbound queue a writer thread drains, because a sync stream allows one Write at
// a time and JobManager must never block on a slow agent.
#pragma once

// First, so that gRPC's Abseil annotations (system headers) yield to hvd's instead of the other
// way round, which would warn about the redefined GUARDED_BY.
#include "common/thread_annotations.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>

#include "hvd/v1/agent.grpc.pb.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job_manager.h"
#include "launcherd/network_check.h"

namespace hvd::launcherd {

class StreamLink;

class AgentGatewayService final : public v1::AgentGateway::Service {
 public:
  // `agents` and `jobs` must outlive the service.
  AgentGatewayService(std::string token, AgentRegistry* agents, JobManager* jobs,
                      std::chrono::milliseconds heartbeat_interval, std::chrono::milliseconds lease)
      : token_(std::move(token)),
        agents_(agents),
        jobs_(jobs),
        heartbeat_interval_(heartbeat_interval),
        lease_(lease) {}

  // Where agents' network probe reports go (null: dropped). Set before serving.
  void SetNetworkCheck(NetworkCheck* network) { network_ = network; }

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream) override;
  // A rank's standard input (stdin_service.h).
  grpc::Status ReadStdin(grpc::ServerContext* context, const v1::ReadStdinRequest* request,
                         grpc::ServerWriter<v1::StdinData>* writer) override;

  // Waits up to `timeout` until every stream has written the commands queued for it (the launcher
  // stops: StopJob should reach the agents before their streams close).
  void Drain(std::chrono::milliseconds timeout);
  // Refuses new streams (the launcher stops); existing ones are closed through the registry.
  void Close();

 private:
  const std::string token_;
  AgentRegistry* const agents_;
  JobManager* const jobs_;
  const std::chrono::milliseconds heartbeat_interval_;
  const std::chrono::milliseconds lease_;
  NetworkCheck* network_ = nullptr;

  std::mutex mu_;
  std::set<StreamLink*> links_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
};

}  // namespace hvd::launcherd
