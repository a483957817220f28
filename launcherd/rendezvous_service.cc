#include "launcherd/rendezvous_service.h"

#include <algorithm>
#include <chrono>

#include "control/grpc_util.h"
#include "control/token.h"

namespace hvd::launcherd {
namespace {

std::string Full(const std::string& scope, const std::string& key) {
  return scope + "/" + key;
}

}  // namespace

bool AcceptToken(const std::string& cluster_token, const SecretResolver& resolver,
                 std::string_view method, std::string_view token) {
  if (control::TokensEqual(token, cluster_token)) return true;
  // A job's secret opens the Rendezvous service only (its handler then checks the secret's job
  // owns the scope); every Launcher and AgentGateway method needs the cluster token.
  const std::string rendezvous = "/" + std::string(v1::Rendezvous::service_full_name()) + "/";
  if (method.substr(0, rendezvous.size()) != rendezvous) return false;
  std::string prefix;
  return resolver && resolver(std::string(token), &prefix);
}

RendezvousService::RendezvousService(KvStore* store, std::string token, SecretResolver resolver)
    : store_(store), token_(std::move(token)), resolver_(std::move(resolver)) {}

grpc::Status RendezvousService::Authorize(const grpc::ServerContext& context,
                                          const std::string& scope,
                                          const std::vector<std::string>& keys) const {
  const auto& md = context.client_metadata();
  auto it = md.find(control::kTokenMetadataKey);
  if (it == md.end()) {
    control::LogRefusedCall(context, "rendezvous: no credential");
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "no credential: send the cluster token (--token-file) or the job's "
                        "secret in the hvd-token metadata");
  }
  const std::string given(it->second.data(), it->second.size());
  if (scope.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "rendezvous: empty scope; use \"job/<id>/attempt/<n>\"");
  }
  for (const auto& k : keys) {
    if (k.empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "rendezvous: empty key in scope '" + scope + "'");
    }
  }
  if (!token_.empty() && control::TokensEqual(given, token_)) return grpc::Status::OK;
  std::string prefix;
  if (!resolver_ || !resolver_(given, &prefix)) {
    control::LogRefusedCall(context,
                            "rendezvous: neither the cluster token nor a live job's secret");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "the hvd-token is neither the cluster token nor a job secret this launcher "
                        "issued (or its job has ended)");
  }
  // The prefix ends with '/', so "job/1/" does not cover scope "job/10/...". An empty prefix would
  // cover everything: refuse it rather than trust a resolver bug.
  const std::string scoped = scope + "/";
  if (prefix.empty() || scoped.compare(0, prefix.size(), prefix) != 0) {
    control::LogRefusedCall(context, "rendezvous: a job's secret used outside that job's keys");
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "scope '" + scope +
                            "' is outside the keys of the job this secret belongs "
                            "to ('" +
                            prefix + "...'); use the cluster token to read other jobs");
  }
  return grpc::Status::OK;
}

grpc::Status RendezvousService::Set(grpc::ServerContext* context, const v1::SetRequest* request,
                                    v1::SetResponse* response) {
  grpc::Status auth = Authorize(*context, request->scope(), {request->key()});
  if (!auth.ok()) return auth;
  return control::ToGrpc(store_->Set(Full(request->scope(), request->key()), request->value()));
}

grpc::Status RendezvousService::Get(grpc::ServerContext* context, const v1::GetRequest* request,
                                    v1::GetResponse* response) {
  grpc::Status auth = Authorize(*context, request->scope(), {request->key()});
  if (!auth.ok()) return auth;
  std::string value;
  Status s = store_->Get(Full(request->scope(), request->key()), &value);
  if (s.ok()) response->set_value(std::move(value));
  return control::ToGrpc(s);
}

grpc::Status RendezvousService::Wait(grpc::ServerContext* context, const v1::WaitRequest* request,
                                     v1::WaitResponse* response) {
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  grpc::Status auth = Authorize(*context, request->scope(), keys);
  if (!auth.ok()) return auth;
  for (auto& k : keys) k = Full(request->scope(), k);
  // A caller's own deadline ends the wait too, so a gRPC thread is never held past it.
  auto timeout = std::chrono::milliseconds(std::max<int64_t>(request->timeout_ms(), 0));
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    timeout = std::clamp(left, std::chrono::milliseconds(0), timeout);
  }
  return control::ToGrpc(store_->Wait(keys, timeout));
}

grpc::Status RendezvousService::Add(grpc::ServerContext* context, const v1::AddRequest* request,
                                    v1::AddResponse* response) {
  grpc::Status auth = Authorize(*context, request->scope(), {request->key()});
  if (!auth.ok()) return auth;
  int64_t value = 0;
  Status s = store_->Add(Full(request->scope(), request->key()), request->delta(), &value);
  if (s.ok()) response->set_value(value);
  return control::ToGrpc(s);
}

grpc::Status RendezvousService::CompareAndSet(grpc::ServerContext* context,
                                              const v1::CompareAndSetRequest* request,
                                              v1::CompareAndSetResponse* response) {
  grpc::Status auth = Authorize(*context, request->scope(), {request->key()});
  if (!auth.ok()) return auth;
  bool swapped = false, found = false;
  std::string current;
  Status s =
      store_->CompareAndSet(Full(request->scope(), request->key()), request->expect_absent(),
                            request->expected(), request->desired(), &swapped, &current, &found);
  if (!s.ok()) return control::ToGrpc(s);
  response->set_swapped(swapped);
  response->set_found(found);
  response->set_current(std::move(current));
  return grpc::Status::OK;
}

}  // namespace hvd::launcherd
