#include "launcherd/agent_gateway_service.h"

#include <thread>

#include "control/tls_grpc.h"
#include "launcherd/stdin_service.h"

namespace hvd::launcherd {

bool AgentGatewayService::AddLink(StreamLink* link) {
  base::MutexLock lock(&mu_);
  if (closed_) return false;
  links_.insert(link);
  return true;
}

void AgentGatewayService::RemoveLink(StreamLink* link) {
  base::MutexLock lock(&mu_);
  links_.erase(link);
}

void AgentGatewayService::Park(StreamLink* link, const std::string& agent_id) {
  base::MutexLock lock(&mu_);
  parked_[link] = agent_id;
}

void AgentGatewayService::Unpark(StreamLink* link) {
  base::MutexLock lock(&mu_);
  parked_.erase(link);
}

void AgentGatewayService::TouchParked() {
  std::vector<std::pair<StreamLink*, std::string>> parked;
  {
    base::MutexLock lock(&mu_);
    parked.assign(parked_.begin(), parked_.end());
  }
  // A link unparked and freed meanwhile is only compared by address: Touch renews nothing then.
  for (const auto& [link, id] : parked) agents_->Touch(id, link);
}

grpc::Status AgentGatewayService::ReadStdin(grpc::ServerContext* context,
                                            const v1::ReadStdinRequest* request,
                                            grpc::ServerWriter<v1::StdinData>* writer) {
  grpc::Status auth = control::CheckAgentCertificate(*context);
  if (!auth.ok()) return auth;
  return ServeReadStdin(jobs_, context, *request, writer);
}

void AgentGatewayService::Close() {
  base::MutexLock lock(&mu_);
  closed_ = true;
}

void AgentGatewayService::Drain(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    bool idle = true;
    {
      base::MutexLock lock(&mu_);
      for (StreamLink* link : links_) idle &= link->Idle();
    }
    if (idle) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace hvd::launcherd
