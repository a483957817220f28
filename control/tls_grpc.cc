#include "control/tls_grpc.h"

#include <grpcpp/security/server_credentials.h>

#include "base/logging.h"
#include "control/log_escape.h"

namespace hvd::control {

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls.ca_pem;
  options.pem_private_key = tls.key_pem;  // empty: no client certificate (hvdrun)
  options.pem_cert_chain = tls.cert_pem;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsConfig& tls,
                                                              TokenAcceptor gate) {
  if (!tls.enabled()) return TokenGatedInsecureCredentials(std::move(gate));
  // REQUEST (not REQUIRE): hvdrun connects without a certificate; agents must send one, which
  // the AgentGateway checks per call. A certificate from another CA fails the handshake itself.
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls.ca_pem;
  options.pem_key_cert_pairs.push_back({tls.key_pem, tls.cert_pem});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(options);
  AddTokenGate(creds.get(), std::move(gate));
  return creds;
}

grpc::Status CheckAgentCertificate(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return grpc::Status::OK;
  bool tls = false;
  for (const grpc::string_ref& v : auth->FindPropertyValues("transport_security_type")) {
    if (std::string(v.data(), v.size()) == "ssl") tls = true;
  }
  if (!tls || auth->IsPeerAuthenticated()) return grpc::Status::OK;
  static RateLimitedLog* const refusals = new RateLimitedLog();
  const std::string peer = context.peer();
  refusals->Warn(PeerHost(peer),
                 "gRPC: refused an agent from " + LogEscape(peer) +
                     ": no client certificate (hvd-agent needs --tls-cert and --tls-key)");
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "this launcher uses TLS and takes agents with a client certificate only: "
                      "start hvd-agent with --tls-cert and --tls-key (a certificate signed by the "
                      "cluster CA, e.g. from scripts/gen-certs.sh) and --tls-ca");
}

}  // namespace hvd::control
