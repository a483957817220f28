#include "control/grpc_util.h"

#include <grpc/support/log.h>

#include "control/log_escape.h"
#include "control/tls_grpc.h"
#include "control/token.h"

namespace hvd::control {

std::unique_ptr<grpc::ClientContext> NewClientContext(const std::string& token,
                                                      std::chrono::milliseconds timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata(kTokenMetadataKey, token);
  if (timeout.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  return ctx;
}

void LogRefusedCall(const grpc::ServerContextBase& context, const std::string& why) {
  static RateLimitedLog* const refusals = new RateLimitedLog();
  const std::string peer = context.peer();  // "ipv4:10.0.0.5:41234", "ipv6:[::1]:5000"
  refusals->Warn(PeerHost(peer), "gRPC: refused a call from " + LogEscape(peer) + ": " + why);
}

grpc::Status CheckToken(const grpc::ServerContextBase& context, const std::string& token) {
  const auto& md = context.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    LogRefusedCall(context, "no cluster token");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "no cluster token: pass --token-file (or set HVD_TOKEN_FILE)");
  }
  std::string_view given(it->second.data(), it->second.size());
  if (!TokensEqual(given, token)) {
    LogRefusedCall(context, "wrong cluster token");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "wrong cluster token: use the launcher's token file");
  }
  return grpc::Status::OK;
}

grpc::Status ToGrpc(const Status& s) {
  using G = grpc::StatusCode;
  G code = G::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      code = G::INVALID_ARGUMENT;
      break;
    case StatusCode::kNotFound:
      code = G::NOT_FOUND;
      break;
    case StatusCode::kAlreadyExists:
      code = G::ALREADY_EXISTS;
      break;
    case StatusCode::kDeadlineExceeded:
      code = G::DEADLINE_EXCEEDED;
      break;
    case StatusCode::kUnavailable:
      code = G::UNAVAILABLE;
      break;
    case StatusCode::kFailedPrecondition:
      code = G::FAILED_PRECONDITION;
      break;
    case StatusCode::kAborted:
      code = G::ABORTED;
      break;
    case StatusCode::kInternal:
      code = G::INTERNAL;
      break;
    case StatusCode::kUnimplemented:
      code = G::UNIMPLEMENTED;
      break;
    case StatusCode::kCancelled:
      code = G::CANCELLED;
      break;
  }
  return grpc::Status(code, s.message());
}

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  using G = grpc::StatusCode;
  if (s.ok()) return Status::OK();
  std::string msg = what + ": " + s.error_message();
  switch (s.error_code()) {
    case G::INVALID_ARGUMENT:
      return InvalidArgument(msg);
    case G::NOT_FOUND:
      return NotFound(msg);
    case G::ALREADY_EXISTS:
      return Status(StatusCode::kAlreadyExists, msg);
    case G::DEADLINE_EXCEEDED:
      return DeadlineExceeded(msg);
    case G::UNAVAILABLE:
      return Unavailable(msg + " (is it running and reachable at that address?)");
    case G::FAILED_PRECONDITION:
      return FailedPrecondition(msg);
    case G::ABORTED:
      return Aborted(msg);
    case G::UNAUTHENTICATED:
    case G::PERMISSION_DENIED:
      return FailedPrecondition(msg);
    case G::CANCELLED:
      return Status(StatusCode::kCancelled, msg);
    case G::UNIMPLEMENTED:
      return Unimplemented(msg);
    default:
      return Internal(msg);
  }
}

grpc::ChannelArguments LauncherChannelArguments() {
  grpc::ChannelArguments args;
  // Fail calls fast while the peer is down instead of queueing them; callers retry with backoff.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  // Keepalive notices a launcher host that vanished without closing the connection; the launcher
  // must permit pings this often (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A restarted launcher is found again within a second, not after gRPC's default backoff (which
  // grows to two minutes): hvdrun's attached watch must be back before the client lease ends.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const TlsConfig& tls) {
  return grpc::CreateCustomChannel(address, ChannelCredentialsFor(tls), LauncherChannelArguments());
}

namespace {

void GrpcLogLine(gpr_log_func_args* args) {
  static RateLimitedLog* const log = new RateLimitedLog();  // never destroyed: gRPC logs late
  const std::string site =
      std::string(args->file != nullptr ? args->file : "?") + ":" + std::to_string(args->line);
  log->Warn(site, "gRPC: " + LogEscape(args->message != nullptr ? args->message : "", 1024));
}

}  // namespace

void RateLimitGrpcLogs() {
  gpr_set_log_function(&GrpcLogLine);
}

}  // namespace hvd::control
