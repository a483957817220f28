// hvd.v1.AgentGateway: one long-lived bidirectional stream per agent, on gRPC's callback API
// (agent_stream.h: a reactor per stream, no thread per agent). Thin: (the token having passed the
// server's gate, control/token_gate.h) the stream checks the agent's TLS certificate, requires
// AgentInfo first, answers RegisterAck, then renews the agent's lease (AgentRegistry::Touch) on
// each message's arrival and queues the message for JobManager (agent_inbox.h), so that reading
// never waits for JobManager's lock: a busy launcher delays what agents said, never their
// liveness. Commands (StartRank, StopJob) reach the stream through its StreamLink, whose queue
// never blocks JobManager on a slow agent. ReadStdin stays a synchronous method.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "base/mutex.h"
#include "base/thread_annotations.h"
#include "hvd/v1/agent.grpc.pb.h"
#include "launcherd/agent_inbox.h"
#include "launcherd/agent_registry.h"
#include "launcherd/agent_stream.h"
#include "launcherd/job_manager.h"
#include "launcherd/network_check.h"

namespace hvd::launcherd {

class AgentGatewayService final
    : public v1::AgentGateway::WithCallbackMethod_Connect<v1::AgentGateway::Service>,
      private StreamHost {
 public:
  // `agents` and `jobs` must outlive the service.
  AgentGatewayService(AgentRegistry* agents, JobManager* jobs,
                      std::chrono::milliseconds heartbeat_interval, std::chrono::milliseconds lease)
      : agents_(agents),
        jobs_(jobs),
        heartbeat_interval_(heartbeat_interval),
        lease_(lease),
        inbox_(agents, jobs) {}

  // Where agents' network probe reports go (null: dropped). Set before serving.
  void SetNetworkCheck(NetworkCheck* network) { inbox_.SetNetworkCheck(network); }

  grpc::ServerBidiReactor<v1::AgentMessage, v1::LauncherMessage>* Connect(
      grpc::CallbackServerContext* context) override {
    return new AgentStream(this, context);  // deletes itself in OnDone
  }
  // A rank's standard input (stdin_service.h).
  grpc::Status ReadStdin(grpc::ServerContext* context, const v1::ReadStdinRequest* request,
                         grpc::ServerWriter<v1::StdinData>* writer) override;

  // Waits up to `timeout` until every stream has written the commands queued for it (the launcher
  // stops: StopJob should reach the agents before their streams close).
  void Drain(std::chrono::milliseconds timeout);
  // Refuses new streams (the launcher stops); existing ones are closed through the registry.
  void Close();
  // Renews the leases of agents whose streams wait for room in their inbox queue (their
  // messages are in the socket, unread on purpose). The launcher's sweeper calls it before it
  // expires leases.
  void TouchParked();
  // Waits up to `timeout` until what the agents sent so far has reached JobManager; true when it
  // has (tests).
  bool WaitApplied(std::chrono::milliseconds timeout) { return inbox_.WaitApplied(timeout); }

 private:
  // StreamHost
  AgentRegistry* agents() override { return agents_; }
  AgentInbox* inbox() override { return &inbox_; }
  std::chrono::milliseconds heartbeat_interval() const override { return heartbeat_interval_; }
  std::chrono::milliseconds lease() const override { return lease_; }
  bool AddLink(StreamLink* link) override;
  void RemoveLink(StreamLink* link) override;
  void Park(StreamLink* link, const std::string& agent_id) override;
  void Unpark(StreamLink* link) override;

  AgentRegistry* const agents_;
  JobManager* const jobs_;
  const std::chrono::milliseconds heartbeat_interval_;
  const std::chrono::milliseconds lease_;

  base::Mutex mu_;
  std::set<StreamLink*> links_ HVD_GUARDED_BY(mu_);
  std::map<StreamLink*, std::string> parked_ HVD_GUARDED_BY(mu_);  // link -> agent id
  bool closed_ HVD_GUARDED_BY(mu_) = false;

  AgentInbox inbox_;  // its destructor applies what is still queued, then ends its thread
};

}  // namespace hvd::launcherd
