// The small gRPC glue shared by hvd-launcherd's services, hvd-agent and hvdrun: the token on every
// call, translation between hvd::Status and grpc::Status, and the channels they dial the launcher
// with. Only control-plane code includes it; the runtime never sees gRPC. What needs no gRPC
// (host:port parsing, clocks) is in base/.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "control/tls.h"
#include "hvd/status.h"

namespace hvd::control {

// A client context carrying `token` and, if timeout > 0, a deadline.
std::unique_ptr<grpc::ClientContext> NewClientContext(const std::string& token,
                                                      std::chrono::milliseconds timeout = {});

// Logs a refused call with the peer's address ("gRPC: refused a call from ipv4:...: why"), at
// most a line per peer host per 10 s (control/log_escape.h). `why` must not hold client text.
void LogRefusedCall(const grpc::ServerContextBase& context, const std::string& why);

// OK when the call carries `token`; PERMISSION_DENIED naming what was wrong otherwise. For unary
// handlers (ServerContext) and callback handlers (CallbackServerContext) alike.
grpc::Status CheckToken(const grpc::ServerContextBase& context, const std::string& token);

grpc::Status ToGrpc(const Status& s);
// `what` names the call for the message ("launcher at 10.0.0.1:7070: SubmitJob").
Status FromGrpc(const grpc::Status& s, const std::string& what);

// The arguments of every channel to the launcher (hvdrun's, the agent's): fail calls fast while
// the launcher is down, notice a vanished launcher host by keepalive, and find a restarted one
// within a second.
grpc::ChannelArguments LauncherChannelArguments();

// Routes gRPC's own log lines through hvd's log: escaped, prefixed "gRPC: ", and at most one per
// gRPC call site every 10 s with a count of the rest. Without it a refused TLS peer that keeps
// retrying writes two raw lines a second ("Certificate verify failed with code 23", "Handshake
// failed ..."). Call once, early in main.
void RateLimitGrpcLogs();

// A channel to "host:port" with LauncherChannelArguments: plain TCP, or TLS with `tls` (tls.h; the
// launcher's --tls-* flags). The token authenticates callers either way.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const TlsConfig& tls = {});

}  // namespace hvd::control
