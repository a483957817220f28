#include "control/tls_grpc.h"

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "base/logging.h"
#include "control/log_escape.h"
#include "control/tls_crl.h"

namespace hvd::control {
namespace {

// With --tls-crl: gRPC's experimental TLS credentials, the only ones in 1.51 that check CRLs
// (set_crl_directory; OpenSSL then checks the peer's chain against them in the handshake). The
// same files as the Ssl credentials below, from a static provider (they are read once at start).
// Note gRPC ignores a missing CRL for a CA (its verify callback passes "unable to get CRL"), so a
// certificate of a CA that --tls-crl has no CRL for is not checked; LoadTls requires nothing of
// the kind because --tls-ca usually holds the one cluster CA whose CRL is given.
std::shared_ptr<grpc::experimental::StaticDataCertificateProvider> ProviderFor(
    const TlsConfig& tls) {
  std::vector<grpc::experimental::IdentityKeyCertPair> pairs;
  if (!tls.cert_pem.empty()) pairs.push_back({tls.key_pem, tls.cert_pem});
  return std::make_shared<grpc::experimental::StaticDataCertificateProvider>(tls.ca_pem, pairs);
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsConfig& tls) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (tls.crl_dir != nullptr) {
    grpc::experimental::TlsChannelCredentialsOptions options;
    options.set_certificate_provider(ProviderFor(tls));
    options.watch_root_certs();
    if (!tls.cert_pem.empty()) options.watch_identity_key_cert_pairs();  // hvdrun: none
    options.set_verify_server_certs(true);
    // The launcher's certificate must name the host dialled, as with SslCredentials (1.51
    // defaults to this verifier on the client side too; said here so that it stays so).
    options.set_certificate_verifier(
        std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
    options.set_check_call_host(true);
    options.set_crl_directory(tls.crl_dir->path());
    return grpc::experimental::TlsCredentials(options);
  }
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
  // the AgentGateway checks per call. A certificate from another CA fails the handshake itself,
  // as does (with --tls-crl) a revoked one.
  if (tls.crl_dir != nullptr) {
    grpc::experimental::TlsServerCredentialsOptions options(ProviderFor(tls));
    options.watch_root_certs();
    options.watch_identity_key_cert_pairs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    options.set_crl_directory(tls.crl_dir->path());
    // gRPC logs a refused certificate by OpenSSL's code only; say here what the code means.
    HVD_LOG(INFO) << "TLS: client certificates are checked against --tls-crl ("
                  << tls.crl_dir->revoked()
                  << " revoked); gRPC logs a revoked one as \"Certificate verify failed with code "
                     "23\" (X509_V_ERR_CERT_REVOKED)";
    std::shared_ptr<grpc::ServerCredentials> creds =
        grpc::experimental::TlsServerCredentials(options);
    AddTokenGate(creds.get(), std::move(gate));
    return creds;
  }
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
    // "ssl" from SslServerCredentials, "tls" from the experimental ones (--tls-crl).
    const std::string type(v.data(), v.size());
    if (type == "ssl" || type == "tls") tls = true;
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
