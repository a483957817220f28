// hvdrun's view of hvd-launcherd: the Launcher service with the token on every call, a deadline
// on every unary call, and errors that name the launcher's address and the call, so "connection
// refused" always says where hvdrun was trying to go. It is hvdrun's gRPC edge: calls take and
// return the job model (control/job_model.h), translated here with control/job_model_proto.h, so
// the rest of hvdrun never sees an hvd.v1 message.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "control/flags.h"
#include "control/host_spec.h"
#include "control/job_model.h"
#include "control/tls.h"
#include "hvd/status.h"
#include "hvd/v1/launcher.grpc.pb.h"

namespace hvd::cli {

class Client {
 public:
  // Does not dial yet: the first call does, and fails fast when nothing listens there.
  // `tls` enabled: TLS to the launcher (control/tls.h), else plain TCP.
  Client(std::string address, std::string token,
         std::chrono::milliseconds timeout = std::chrono::seconds(10), control::TlsConfig tls = {});

  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }  // for calls of their own (stdin_forward.h)
  const control::TlsConfig& tls() const { return tls_; }

  Status Submit(const control::JobSpec& spec, std::string* job_id);
  Status GetJob(const std::string& job_id, control::JobStatus* status);
  // The launcher's summaries (ListJobs): argv bounded, no ranks, environment or network.
  Status ListJobs(std::vector<control::JobStatus>* jobs);
  // `signal`: the first signal the ranks get (CancelJobRequest.signal; 0: SIGTERM).
  Status Cancel(const std::string& job_id, const std::string& reason, control::JobState* state,
                int signal = 0);
  // Asks ranks of a running job for their stacks (Launcher.DumpStacks; `ranks` empty: every
  // rank); *asked: the ranks asked (those running).
  Status DumpStacks(const std::string& job_id, const std::vector<int>& ranks,
                    const std::string& reason, std::vector<int>* asked);
  Status ListAgents(std::vector<control::AgentInfo>* agents);
  // An elastic job's hosts from --host-discovery-script (Launcher.UpdateJobHosts).
  Status UpdateJobHosts(const std::string& job_id, const std::vector<control::HostSlots>& hosts);

  // Streams the job's events from `from_seq` to `on_event` until the stream ends (the job ended,
  // or without `follow` the output so far was sent). OK when the launcher closed the stream
  // normally; an error when it broke or was interrupted (code kCancelled). `attach`: this is the
  // client the job was submitted by, and the job is cancelled when it stays away (the lease).
  // An event of a kind this build does not know (a newer launcher's) is skipped.
  Status Watch(const std::string& job_id, int64_t from_seq, bool follow, bool attach,
               const std::function<void(const control::JobEvent&)>& on_event);

  // Ends every Watch in progress, and any started later, with kCancelled. Thread-safe: called
  // from the signal thread while the main thread is blocked reading the stream.
  void InterruptWatches();
  bool interrupted();

 private:
  std::string What(const char* call) const;
  // control::FromGrpc naming this launcher and `call`, with a hint where the address is wrong.
  Status FromGrpc(const grpc::Status& status, const char* call) const;

  std::string address_;
  std::string token_;
  std::chrono::milliseconds timeout_;
  control::TlsConfig tls_;
  std::unique_ptr<v1::Launcher::Stub> stub_;

  base::Mutex mu_;
  bool interrupted_ HVD_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> watches_ HVD_GUARDED_BY(mu_);
};

// --launcher and --token-file, shared by every subcommand that talks to a cluster, with the
// HVD_LAUNCHER and HVD_TOKEN_FILE environment variables as defaults.
struct ClusterFlags {
  std::string launcher;
  std::string token_file;
  int64_t timeout_seconds = 10;
  control::TlsFiles tls;  // --tls-ca (and --tls-cert, --tls-key), $HVD_TLS_*

  // Sets the defaults from the environment and registers the flags.
  void Register(control::FlagSet* flags);
  // Whether a launcher was named (flag or environment).
  bool HasLauncher() const { return !launcher.empty(); }
  // Reads the token and makes a client. InvalidArgument (a usage error) when the launcher or the
  // token file is missing or unreadable, saying which flag or variable to set.
  Status Connect(std::unique_ptr<Client>* client) const;
};

}  // namespace hvd::cli
