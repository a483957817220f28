// TLS for the hvds:// rendezvous (docs/security.md, "TLS"): a rank's side of the launcher's TLS
// endpoint, over a connected non-blocking socket and with the same deadlines as plain frames
// (base/kv_protocol.h). The rank trusts the CA the agent gives it (HVD_RENDEZVOUS_CA, the agent's
// own --tls-ca) and requires the launcher's certificate to name the host it dialed, as hvdrun and
// the agents do over gRPC; it presents no certificate: the job secret in HELLO authenticates it.
//
// libhvd uses OpenSSL when the build found it (HVD_RUNTIME_TLS); built without it,
// TlsClientContext::New says so and how to rebuild, and hvd:// (plain) works as before.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/kv_protocol.h"
#include "hvd/status.h"

namespace hvd::runtime::rendezvous {

// One established TLS session. Frees it when destroyed; the socket stays the caller's.
class TlsChannel {
 public:
  virtual ~TlsChannel() = default;
  // As base::kv::WriteFrame / ReadFrame, through the session.
  virtual Status WriteFrame(std::string_view payload, base::kv::Deadline deadline) = 0;
  virtual Status ReadFrame(std::string* payload, base::kv::Deadline deadline) = 0;
  // Whether a read would return at once (a frame has begun, the peer closed, or the connection
  // failed). Never blocks; consumes TLS records that carry no data.
  virtual bool Readable() = 0;
};

// The CA certificates a store trusts, parsed once.
class TlsClientContext {
 public:
  // `ca_pem`: one or more PEM certificates; `source` names where they came from in errors
  // ("HVD_RENDEZVOUS_CA"). `crl_pem` ("": none): revocation lists; with them a launcher
  // certificate they list is refused, and every CA in the chain needs its CRL (as with gRPC's
  // --tls-crl). InvalidArgument when no certificate parses or crl_pem holds no CRL;
  // FailedPrecondition when this libhvd was built without OpenSSL.
  static Status New(const std::string& ca_pem, const std::string& source,
                    const std::string& crl_pem, std::shared_ptr<TlsClientContext>* out);
  virtual ~TlsClientContext() = default;

  // Handshakes over `fd` (connected, non-blocking) with the server at `host` ("peer" names it
  // in errors). A certificate that does not verify is FailedPrecondition (retrying cannot help);
  // a connection that ends during the handshake is Unavailable; the deadline DeadlineExceeded.
  virtual Status Connect(int fd, const std::string& host, const std::string& peer,
                         base::kv::Deadline deadline, std::unique_ptr<TlsChannel>* out) = 0;
};

}  // namespace hvd::runtime::rendezvous
