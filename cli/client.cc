#include "cli/client.h"

#include <cstdlib>

#include "control/grpc_util.h"
#include "control/token.h"

namespace hvd::cli {

Client::Client(std::string address, std::string token, std::chrono::milliseconds timeout)
    : address_(std::move(address)),
      token_(std::move(token)),
      timeout_(timeout),
      stub_(v1::Launcher::NewStub(control::NewChannel(address_))) {}

std::string Client::What(const char* call) const {
  return "launcher at " + address_ + ": " + call;
}

Status Client::Submit(const v1::JobSpec& spec, std::string* job_id) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  HVD_RETURN_IF_ERROR(
      control::FromGrpc(stub_->SubmitJob(ctx.get(), req, &resp), What("SubmitJob")));
  *job_id = resp.job_id();
  return Status::OK();
}

Status Client::GetJob(const std::string& job_id, v1::JobStatus* status) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  return control::FromGrpc(stub_->GetJob(ctx.get(), req, status), What("GetJob"));
}

Status Client::ListJobs(std::vector<v1::JobStatus>* jobs) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::ListJobsResponse resp;
  HVD_RETURN_IF_ERROR(control::FromGrpc(stub_->ListJobs(ctx.get(), v1::ListJobsRequest(), &resp),
                                        What("ListJobs")));
  jobs->assign(resp.jobs().begin(), resp.jobs().end());
  return Status::OK();
}

Status Client::Cancel(const std::string& job_id, const std::string& reason, v1::JobState* state) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  v1::CancelJobResponse resp;
  HVD_RETURN_IF_ERROR(
      control::FromGrpc(stub_->CancelJob(ctx.get(), req, &resp), What("CancelJob")));
  *state = resp.state();
  return Status::OK();
}

Status Client::ListAgents(std::vector<v1::AgentInfo>* agents) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::ListAgentsResponse resp;
  HVD_RETURN_IF_ERROR(control::FromGrpc(
      stub_->ListAgents(ctx.get(), v1::ListAgentsRequest(), &resp), What("ListAgents")));
  agents->assign(resp.agents().begin(), resp.agents().end());
  return Status::OK();
}

Status Client::Watch(const std::string& job_id, int64_t from_seq, bool follow, bool attach,
                     const std::function<void(const v1::JobEvent&)>& on_event) {
  // No deadline: a followed job may run for days. InterruptWatches() ends it instead.
  auto ctx = control::NewClientContext(token_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (interrupted_) return Status(StatusCode::kCancelled, What("WatchJob") + ": interrupted");
    watches_.insert(ctx.get());
  }
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_from_seq(from_seq);
  req.set_follow(follow);
  req.set_attach(attach);
  auto reader = stub_->WatchJob(ctx.get(), req);
  v1::JobEvent event;
  while (reader->Read(&event)) on_event(event);
  grpc::Status gs = reader->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    watches_.erase(ctx.get());
  }
  return control::FromGrpc(gs, What("WatchJob"));
}

void Client::InterruptWatches() {
  std::lock_guard<std::mutex> lock(mu_);
  interrupted_ = true;
  for (grpc::ClientContext* ctx : watches_) ctx->TryCancel();
}

bool Client::interrupted() {
  std::lock_guard<std::mutex> lock(mu_);
  return interrupted_;
}

void ClusterFlags::Register(control::FlagSet* flags) {
  if (const char* v = std::getenv("HVD_LAUNCHER"); v != nullptr) launcher = v;
  if (const char* v = std::getenv("HVD_TOKEN_FILE"); v != nullptr) token_file = v;
  flags->String("--launcher", &launcher,
                "HOST:PORT of hvd-launcherd's gRPC endpoint (default: $HVD_LAUNCHER)");
  flags->String("--token-file", &token_file,
                "file holding the cluster token (default: $HVD_TOKEN_FILE)");
  flags->Int("--timeout", &timeout_seconds, "seconds to wait for the launcher to answer a call");
}

Status ClusterFlags::Connect(std::unique_ptr<Client>* client) const {
  if (launcher.empty()) {
    return InvalidArgument(
        "no launcher: pass --launcher HOST:PORT (or set HVD_LAUNCHER) to name hvd-launcherd");
  }
  std::string host;
  int port = 0;
  HVD_RETURN_IF_ERROR_CTX(control::SplitHostPort(launcher, &host, &port), "--launcher");
  if (token_file.empty()) {
    return InvalidArgument("the launcher at " + launcher +
                           " needs the cluster token: pass --token-file FILE (or set "
                           "HVD_TOKEN_FILE) with the file hvd-launcherd was started with");
  }
  if (timeout_seconds <= 0) {
    return InvalidArgument("--timeout must be a positive number of seconds, not " +
                           std::to_string(timeout_seconds));
  }
  std::string token;
  HVD_RETURN_IF_ERROR(control::ReadTokenFile(token_file, &token));
  client->reset(new Client(launcher, token, std::chrono::seconds(timeout_seconds)));
  return Status::OK();
}

}  // namespace hvd::cli
