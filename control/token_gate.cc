#include "control/token_gate.h"

#include <grpc/grpc_security.h>

#include <string>

#include "control/log_escape.h"
#include "control/token.h"

namespace hvd::control {
namespace {

// A refusal, at most a line per method and reason per 10 s. The method is the client's text:
// escaped and bounded, and the limiter forgets keys past its cap.
void LogRefusal(std::string_view method, const char* why) {
  static RateLimitedLog* const refusals = new RateLimitedLog();
  const std::string shown = LogEscape(std::string(method.substr(0, 128)), 128);
  refusals->Warn(shown + " " + why, "gRPC: refused a call to " + shown + ": " + why);
}

// The verdict on one call's metadata: OK, or the code and message to fail it with.
grpc_status_code Judge(const TokenAcceptor& accept, std::string_view method,
                       const std::string_view* token, const char** message) {
  if (token == nullptr) {
    LogRefusal(method, "no cluster token");
    *message = kNoTokenMessage;
    return GRPC_STATUS_UNAUTHENTICATED;
  }
  if (!accept(method, *token)) {
    LogRefusal(method, "wrong cluster token");
    *message = kWrongTokenMessage;
    return GRPC_STATUS_PERMISSION_DENIED;
  }
  *message = nullptr;
  return GRPC_STATUS_OK;
}

constexpr std::string_view kPathKey = ":path";

// gRPC core's processor interface, used for plain TCP (the C++ InsecureServerCredentials refuse
// a processor). Runs inline on the transport's thread: the check is a comparison.
struct CoreGate {
  TokenAcceptor accept;

  static void Process(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb cb, void* user_data) {
    auto* gate = static_cast<CoreGate*>(state);
    std::string_view token_storage, method;
    const std::string_view* token = nullptr;
    for (size_t i = 0; i < num_md; ++i) {
      const std::string_view key(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
                                 GRPC_SLICE_LENGTH(md[i].key));
      const std::string_view value(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
                                   GRPC_SLICE_LENGTH(md[i].value));
      if (key == kPathKey) {
        method = value;
      } else if (key == kTokenMetadataKey && token == nullptr) {
        token_storage = value;
        token = &token_storage;
      }
    }
    const char* message = nullptr;
    const grpc_status_code code = Judge(gate->accept, method, token, &message);
    // The token stays in the call's metadata: the Rendezvous handlers read it for the scope.
    cb(user_data, nullptr, 0, nullptr, 0, code, message);
  }
  static void Destroy(void* state) { delete static_cast<CoreGate*>(state); }
};

class GatedInsecureCredentials final : public grpc::ServerCredentials {
 public:
  explicit GatedInsecureCredentials(TokenAcceptor accept) : accept_(std::move(accept)) {}

  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) override {
    // The gate is this class's processor; a second one has no place here.
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    grpc_server_credentials* creds = grpc_insecure_server_credentials_create();
    grpc_server_credentials_set_auth_metadata_processor(
        creds, {&CoreGate::Process, &CoreGate::Destroy, new CoreGate{accept_}});
    const int port = grpc_server_add_http2_port(server, addr.c_str(), creds);
    grpc_server_credentials_release(creds);
    return port;
  }

  const TokenAcceptor accept_;
};

// The C++ interface, for credentials that take one (TLS).
class CppGate final : public grpc::AuthMetadataProcessor {
 public:
  explicit CppGate(TokenAcceptor accept) : accept_(std::move(accept)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* /*context*/,
                       OutputMetadata* /*consumed*/, OutputMetadata* /*response*/) override {
    auto it = auth_metadata.find(kTokenMetadataKey);
    std::string_view token_storage, method;
    const std::string_view* token = nullptr;
    if (it != auth_metadata.end()) {
      token_storage = std::string_view(it->second.data(), it->second.size());
      token = &token_storage;
    }
    auto path = auth_metadata.find(grpc::string_ref(kPathKey.data(), kPathKey.size()));
    if (path != auth_metadata.end()) {
      method = std::string_view(path->second.data(), path->second.size());
    }
    const char* message = nullptr;
    const grpc_status_code code = Judge(accept_, method, token, &message);
    if (code == GRPC_STATUS_OK) return grpc::Status::OK;
    return grpc::Status(static_cast<grpc::StatusCode>(code), message);
  }

 private:
  const TokenAcceptor accept_;
};

}  // namespace

std::shared_ptr<grpc::ServerCredentials> TokenGatedInsecureCredentials(TokenAcceptor accept) {
  return std::make_shared<GatedInsecureCredentials>(std::move(accept));
}

void AddTokenGate(grpc::ServerCredentials* creds, TokenAcceptor accept) {
  creds->SetAuthMetadataProcessor(std::make_shared<CppGate>(std::move(accept)));
}

}  // namespace hvd::control
