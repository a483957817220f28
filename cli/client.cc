#include "cli/client.h"

#include <cstdlib>

#include "base/net.h"
#include "control/grpc_util.h"
#include "control/job_model_proto.h"
#include "control/job_state_proto.h"
#include "control/spec_limits.h"
#include "control/token.h"

namespace hvd::cli {

Client::Client(std::string address, std::string token, std::chrono::milliseconds timeout,
               control::TlsConfig tls)
    : address_(std::move(address)),
      token_(std::move(token)),
      timeout_(timeout),
      tls_(std::move(tls)),
      stub_(v1::Launcher::NewStub(control::NewChannel(address_, tls_))) {}

std::string Client::What(const char* call) const {
  return "launcher at " + address_ + ": " + call;
}

Status Client::FromGrpc(const grpc::Status& status, const char* call) const {
  // gRPC's own words for an HTTP/1 server at the address ("Trying to connect an http1.x
  // server") say nothing of why: the launcher's REST port given for its gRPC one.
  if (!status.ok() && status.error_message().find("http1") != std::string::npos) {
    return Unavailable(What(call) + ": " + address_ +
                       " answers HTTP/1.x, not gRPC: it is probably the launcher's --http (REST) "
                       "port. Give --launcher the launcher's gRPC port instead (hvd-launcherd "
                       "--listen, 7070 by default; hvd-launcherd prints both when it starts: "
                       "\"hvd-launcherd: gRPC HOST:PORT, ..., HTTP HOST:PORT\")");
  }
  Status s = control::FromGrpc(status, What(call));
  const std::string hint = control::TlsFailureHint(status.error_message(), tls_.enabled());
  if (!s.ok() && !hint.empty()) s = Status(s.code(), s.message() + "; " + hint);
  return s;
}

Status Client::Submit(const control::JobSpec& spec, std::string* job_id) {
  // The launcher's own checks (control/spec_limits.h), here first: the same message without a
  // round trip, for the environment forwarded after BuildJobSpec too.
  HVD_RETURN_IF_ERROR(control::ValidateJobSpec(spec));
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::SubmitJobRequest req;
  control::ToProto(spec, req.mutable_spec());
  v1::SubmitJobResponse resp;
  HVD_RETURN_IF_ERROR(FromGrpc(stub_->SubmitJob(ctx.get(), req, &resp), "SubmitJob"));
  *job_id = resp.job_id();
  return Status::OK();
}

Status Client::GetJob(const std::string& job_id, control::JobStatus* status) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::GetJobRequest req;
  req.set_job_id(job_id);
  v1::JobStatus resp;
  HVD_RETURN_IF_ERROR(FromGrpc(stub_->GetJob(ctx.get(), req, &resp), "GetJob"));
  *status = control::FromProto(resp);
  return Status::OK();
}

Status Client::ListJobs(std::vector<control::JobStatus>* jobs) {
  // Page by page (each a bounded message of summaries), bounded in number too: a launcher keeps
  // its finished jobs up to a limit, so a token that never ends is a launcher bug, not a loop.
  constexpr int kMaxPages = 10000;
  std::vector<control::JobStatus> out;
  v1::ListJobsRequest req;
  req.set_page_size(500);
  for (int page = 0; page < kMaxPages; ++page) {
    auto ctx = control::NewClientContext(token_, timeout_);
    v1::ListJobsResponse resp;
    HVD_RETURN_IF_ERROR(FromGrpc(stub_->ListJobs(ctx.get(), req, &resp), "ListJobs"));
    for (const v1::JobStatus& j : resp.jobs()) out.push_back(control::FromProto(j));
    if (resp.next_page_token().empty()) {
      *jobs = std::move(out);
      return Status::OK();
    }
    req.set_page_token(resp.next_page_token());
  }
  return Internal(What("ListJobs") + ": more than " + std::to_string(kMaxPages) +
                  " pages; the launcher's page tokens do not end");
}

Status Client::Cancel(const std::string& job_id, const std::string& reason,
                      control::JobState* state, int signal) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  req.set_reason(reason);
  req.set_signal(signal);
  v1::CancelJobResponse resp;
  HVD_RETURN_IF_ERROR(FromGrpc(stub_->CancelJob(ctx.get(), req, &resp), "CancelJob"));
  *state = control::JobStateFromProto(resp.state());
  return Status::OK();
}

Status Client::DumpStacks(const std::string& job_id, const std::vector<int>& ranks,
                          const std::string& reason, std::vector<int>* asked) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::DumpStacksRequest req;
  req.set_job_id(job_id);
  for (int r : ranks) req.add_ranks(r);
  req.set_reason(reason);
  v1::DumpStacksResponse resp;
  HVD_RETURN_IF_ERROR(FromGrpc(stub_->DumpStacks(ctx.get(), req, &resp), "DumpStacks"));
  asked->assign(resp.ranks().begin(), resp.ranks().end());
  return Status::OK();
}

Status Client::UpdateJobHosts(const std::string& job_id,
                              const std::vector<control::HostSlots>& hosts) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::UpdateJobHostsRequest req;
  req.set_job_id(job_id);
  for (const control::HostSlots& h : hosts) {
    v1::HostSlots* p = req.add_hosts();
    p->set_host(h.host);
    p->set_slots(h.slots);
  }
  v1::UpdateJobHostsResponse resp;
  return FromGrpc(stub_->UpdateJobHosts(ctx.get(), req, &resp), "UpdateJobHosts");
}

Status Client::ListAgents(std::vector<control::AgentInfo>* agents) {
  auto ctx = control::NewClientContext(token_, timeout_);
  v1::ListAgentsResponse resp;
  HVD_RETURN_IF_ERROR(
      FromGrpc(stub_->ListAgents(ctx.get(), v1::ListAgentsRequest(), &resp), "ListAgents"));
  agents->clear();
  for (const v1::AgentInfo& a : resp.agents()) agents->push_back(control::AgentInfoFromProto(a));
  return Status::OK();
}

Status Client::Watch(const std::string& job_id, int64_t from_seq, bool follow, bool attach,
                     const std::function<void(const control::JobEvent&)>& on_event) {
  // No deadline: a followed job may run for days. InterruptWatches() ends it instead.
  auto ctx = control::NewClientContext(token_);
  {
    base::MutexLock lock(&mu_);
    if (interrupted_) return Status(StatusCode::kCancelled, What("WatchJob") + ": interrupted");
    watches_.insert(ctx.get());
  }
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  req.set_from_seq(from_seq);
  req.set_follow(follow);
  req.set_attach(attach);
  auto reader = stub_->WatchJob(ctx.get(), req);
  v1::JobEvent message;
  control::JobEvent event;
  while (reader->Read(&message)) {
    if (control::FromProto(message, &event)) on_event(event);
  }
  grpc::Status gs = reader->Finish();
  {
    base::MutexLock lock(&mu_);
    watches_.erase(ctx.get());
  }
  return FromGrpc(gs, "WatchJob");
}

void Client::InterruptWatches() {
  base::MutexLock lock(&mu_);
  interrupted_ = true;
  for (grpc::ClientContext* ctx : watches_) ctx->TryCancel();
}

bool Client::interrupted() {
  base::MutexLock lock(&mu_);
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
  if (const char* v = std::getenv("HVD_TLS_CA"); v != nullptr) tls.ca = v;
  if (const char* v = std::getenv("HVD_TLS_CERT"); v != nullptr) tls.cert = v;
  if (const char* v = std::getenv("HVD_TLS_KEY"); v != nullptr) tls.key = v;
  if (const char* v = std::getenv("HVD_TLS_CRL"); v != nullptr) tls.crl = v;
  flags->String("--tls-ca", &tls.ca,
                "CA certificate (PEM) that signed the launcher's: TLS to a launcher started with "
                "--tls-cert (default: $HVD_TLS_CA, else plain TCP)");
  flags->String("--tls-cert", &tls.cert,
                "client certificate (PEM) to present, optional (default: $HVD_TLS_CERT)");
  flags->String("--tls-key", &tls.key, "private key of --tls-cert (default: $HVD_TLS_KEY)");
  flags->String("--tls-crl", &tls.crl,
                "CRL(s) (PEM) of --tls-ca: a revoked launcher certificate is refused (default: "
                "$HVD_TLS_CRL, else no revocation check)");
}

Status ClusterFlags::Connect(std::unique_ptr<Client>* client) const {
  if (launcher.empty()) {
    return InvalidArgument(
        "no launcher: pass --launcher HOST:PORT (or set HVD_LAUNCHER) to name hvd-launcherd");
  }
  base::HostPort launcher_hp;
  HVD_RETURN_IF_ERROR_CTX(base::ParseHostPort(launcher, &launcher_hp), "--launcher");
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
  control::TlsConfig tls_config;
  HVD_RETURN_IF_ERROR(control::LoadTls(tls, control::TlsRole::kClient, &tls_config));
  client->reset(
      new Client(launcher, token, std::chrono::seconds(timeout_seconds), std::move(tls_config)));
  return Status::OK();
}

}  // namespace hvd::cli
