// A token check that runs before gRPC reads a call's message (issue 20, finding 7). The services
// check the token in their handlers, but gRPC's sync server receives a unary call's whole request
// before any handler runs: a caller without a token could make the launcher buffer up to the
// receive limit per call. A gate on the server's credentials runs in gRPC's server auth filter on
// the call's headers ("hvd-token") and fails the call there, so its body is never assembled.
//
// The gate only keeps out callers that hold no token the launcher would accept at all; each
// handler still checks exactly which token it needs (the Rendezvous service accepts a job's
// secret for that job's keys only).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string_view>

namespace hvd::control {

// Whether `token` (the "hvd-token" metadata) may pass the gate.
using TokenAcceptor = std::function<bool(std::string_view token)>;

// Plain TCP server credentials (as grpc::InsecureServerCredentials) with the gate. Calls without
// a token fail UNAUTHENTICATED, calls with one `accept` refuses fail PERMISSION_DENIED, with the
// messages control::CheckToken gives, before their message is read.
std::shared_ptr<grpc::ServerCredentials> TokenGatedInsecureCredentials(TokenAcceptor accept);

// The same gate on other server credentials (TLS, grpc::SslServerCredentials), as their
// AuthMetadataProcessor.
void AddTokenGate(grpc::ServerCredentials* creds, TokenAcceptor accept);

}  // namespace hvd::control
