// hvd.v1.Rendezvous: the launcher's rendezvous store for tools (and tests) over gRPC. Thin: each
// call checks who may touch the scope and forwards to KvStore with key = scope + "/" + key. The
// runtime reaches the same store through KvServer instead (docs/rendezvous.md).
//
// Authorization ("hvd-token" metadata): the cluster token grants every scope; a job's secret
// grants the scopes under that job's prefix ("job/<id>/..."), as SecretResolver maps it.
#pragma once

#include "launcherd/kv_server.h"
#include "launcherd/kv_store.h"

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>
#include <vector>

#include "hvd/v1/rendezvous.grpc.pb.h"

namespace hvd::launcherd {

// The launcher's token gate (control/token_gate.h), its one token check for every service: the
// cluster token opens every method; a secret `resolver` knows (a live job's) opens the Rendezvous
// methods only, whose handlers then check the scope it covers (Authorize below).
bool AcceptToken(const std::string& cluster_token, const SecretResolver& resolver,
                 std::string_view method, std::string_view token);

class RendezvousService final : public hvd::v1::Rendezvous::Service {
 public:
  // `store` must outlive the service. `token` is the cluster token (non-empty).
  RendezvousService(KvStore* store, std::string token, SecretResolver resolver);

  grpc::Status Set(grpc::ServerContext* context, const v1::SetRequest* request,
                   v1::SetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   v1::GetResponse* response) override;
  // Blocks a gRPC thread for up to timeout_ms (clamped to the call's deadline). Call
  // KvStore::Shutdown() before grpc::Server::Shutdown() so blocked waits do not hold it up.
  grpc::Status Wait(grpc::ServerContext* context, const v1::WaitRequest* request,
                    v1::WaitResponse* response) override;
  grpc::Status Add(grpc::ServerContext* context, const v1::AddRequest* request,
                   v1::AddResponse* response) override;
  grpc::Status CompareAndSet(grpc::ServerContext* context, const v1::CompareAndSetRequest* request,
                             v1::CompareAndSetResponse* response) override;

 private:
  // OK when the call's credential covers `scope`; PERMISSION_DENIED / UNAUTHENTICATED naming what
  // was wrong, or INVALID_ARGUMENT for an empty scope or key.
  grpc::Status Authorize(const grpc::ServerContext& context, const std::string& scope,
                         const std::vector<std::string>& keys) const;

  KvStore* const store_;
  const std::string token_;
  const SecretResolver resolver_;
};

}  // namespace hvd::launcherd
