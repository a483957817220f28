// TLS material for the control plane's gRPC (and the launcher's REST): the --tls-cert, --tls-key
// and --tls-ca files, read and checked once at start so that a wrong file is one clear line
// ("--tls-key /etc/hvd/a.key does not match --tls-cert /etc/hvd/a.crt") instead of a handshake
// failure deep inside gRPC on the first call. No gRPC here (tls_grpc.h builds credentials).
//
// Who holds what (docs/security.md, "TLS"):
//   hvd-launcherd  cert + key (its server certificate) + CA (verifies agents' client certificates)
//   hvd-agent      cert + key (its client certificate, mutual TLS) + CA (verifies the launcher)
//   hvdrun         CA (verifies the launcher); cert + key optional (users authenticate with the
//                  cluster token)
// Each may add --tls-crl, the CA's certificate revocation list(s): the peer's certificate is then
// also checked against it (tls_crl.h). Without it nothing is checked for revocation.
// No flag at all is plain TCP, as before.
#pragma once

#include <memory>
#include <string>

#include "hvd/status.h"

namespace hvd::control {

class CrlDirectory;  // tls_crl.h

// The files as the flags name them; empty: not given.
struct TlsFiles {
  std::string cert, key, ca;
  std::string crl = {};  // initialized here so that {cert, key, ca} stays warning-free
  bool empty() const { return cert.empty() && key.empty() && ca.empty() && crl.empty(); }
};

// The files' PEM text, checked. Default (all empty): plain TCP.
struct TlsConfig {
  std::string cert_pem, key_pem, ca_pem;
  // With --tls-crl: the CRL text and gRPC's private hashed copy of it (shared by the copies of
  // this config, removed with the last). Null: no revocation check.
  std::string crl_pem;
  std::shared_ptr<const CrlDirectory> crl_dir;
  bool enabled() const { return !ca_pem.empty() || !cert_pem.empty(); }
};

enum class TlsRole {
  kServer,  // hvd-launcherd: cert, key and CA required
  kAgent,   // hvd-agent: cert, key and CA required (mutual TLS)
  kClient,  // hvdrun: CA required; cert and key optional (both or neither)
};

// Reads and checks `files` for `role` into *out. Nothing given: OK, plain TCP. Otherwise
// InvalidArgument naming the flag, the path and what is wrong: a missing flag for the role, an
// unreadable file, a file without a PEM certificate or key, a key that does not match the
// certificate, a certificate that has expired or is not yet valid, or one that --tls-ca did not
// sign; with --tls-crl also a file without a PEM CRL, a CRL --tls-ca did not issue or past its
// nextUpdate, and a --tls-cert the CRL revokes.
Status LoadTls(const TlsFiles& files, TlsRole role, TlsConfig* out);

// HVD_TLS_CERT, HVD_TLS_KEY, HVD_TLS_CA and HVD_TLS_CRL, for the fields still empty (flags win).
void TlsFilesFromEnvironment(TlsFiles* files);

// What to check when a connection failed with gRPC's `message` ("Ssl handshake failed: ...,
// certificate verify failed"): a sentence naming the flag at fault, or "" when the message says
// nothing of TLS. `tls`: whether this side used TLS.
std::string TlsFailureHint(const std::string& message, bool tls);

}  // namespace hvd::control
