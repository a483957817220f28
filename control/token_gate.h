// The cluster token, checked once per call, before gRPC reads the call's message. gRPC's sync
// server receives a unary call's whole request before any handler runs, so a check in the handlers
// would let a caller without a token make the launcher buffer up to the receive limit per call
// (issue 20, finding 7), and it had to be repeated in every method. The gate runs in gRPC's server
// auth filter on the call's headers ("hvd-token", and ":path" for the method) and fails the call
// there: its body is never assembled and no handler runs. The launcher's services therefore do
// not check the token themselves.
//
// The acceptor sees the method, so one gate serves services that need different tokens: the
// Launcher and AgentGateway methods take the cluster token only; the Rendezvous methods also take
// a live job's secret, and their handler then checks the scope that secret opens.
//
// Why not a grpc::experimental server interceptor: in gRPC 1.51 (Debian 12) a server interceptor
// can observe a call but not fail it before its handler runs (Hijack is for client interceptors).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string_view>

namespace hvd::control {

// Whether a call to `method` ("/hvd.v1.Launcher/SubmitJob", the call's ":path"; "" if absent)
// carrying `token` (its "hvd-token" metadata) may pass the gate.
using TokenAcceptor = std::function<bool(std::string_view method, std::string_view token)>;

// The messages calls are failed with, as the tests and users see them.
inline constexpr const char* kNoTokenMessage =
    "no cluster token: pass --token-file (or set HVD_TOKEN_FILE)";
inline constexpr const char* kWrongTokenMessage =
    "wrong cluster token: use the launcher's token file";

// Plain TCP server credentials (as grpc::InsecureServerCredentials) with the gate. Calls without
// a token fail UNAUTHENTICATED (kNoTokenMessage), calls with one `accept` refuses fail
// PERMISSION_DENIED (kWrongTokenMessage), before their message is read. Refusals are logged, at
// most a line per method and reason per 10 s (the gate does not see the peer's address).
std::shared_ptr<grpc::ServerCredentials> TokenGatedInsecureCredentials(TokenAcceptor accept);

// The same gate on other server credentials (TLS, grpc::SslServerCredentials), as their
// AuthMetadataProcessor.
void AddTokenGate(grpc::ServerCredentials* creds, TokenAcceptor accept);

}  // namespace hvd::control
