// gRPC credentials from a checked TlsConfig (tls.h): the launcher's server side (TLS, client
// certificates requested and verified against the cluster CA, the token gate of token_gate.h on
// top), and the channel credentials agents and hvdrun dial it with.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "control/tls.h"
#include "control/token_gate.h"

namespace hvd::control {

// Insecure credentials when `tls` is not enabled (plain TCP, as before).
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsConfig& tls);

// The launcher's port: plain TCP with the token gate when `tls` is not enabled; otherwise TLS
// with the same gate. One port serves agents (mutual TLS) and hvdrun (server-authenticated TLS
// and the token): a client certificate is requested and, when sent, must verify against the
// cluster CA or the handshake fails; AgentGateway calls then require one (CheckAgentCertificate).
std::shared_ptr<grpc::ServerCredentials> ServerCredentialsFor(const TlsConfig& tls,
                                                              TokenAcceptor gate);

// For the AgentGateway service: OK on plain TCP and on TLS connections that presented a client
// certificate the CA verified; PERMISSION_DENIED saying what the agent needs otherwise.
grpc::Status CheckAgentCertificate(const grpc::ServerContextBase& context);

}  // namespace hvd::control
