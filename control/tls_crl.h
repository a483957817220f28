// Certificate revocation for the control plane's TLS (--tls-crl; docs/security.md, "TLS"): the
// CRL file is checked once at start (tls.cc's LoadTls calls CheckCrl), and gRPC is handed a
// private copy in the form it reads, an OpenSSL hashed directory (tls_grpc.cc, set_crl_directory).
//
// Why a directory of our own: gRPC 1.51's TlsCredentialsOptions take CRLs only as a directory of
// files named <issuer-name-hash>.r<N>, which a PEM file from scripts/gen-certs.sh (or a site PKI)
// is not; and pointing gRPC at a directory others may write would let them change what this
// process trusts. The copy is made once, so a changed CRL file takes effect on restart.
#pragma once

#include <openssl/x509.h>

#include <memory>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::control {

// Checks the CRLs in `crl_pem` (read from --tls-crl `crl_path`) against the CAs of --tls-ca
// (`ca_path`): at least one PEM CRL, each signed by one of `cas`, none past its nextUpdate or
// before its lastUpdate. When `own` (this process's --tls-cert `cert_path`) is given, it must not
// be revoked. InvalidArgument naming the flag, the path and what to do otherwise.
Status CheckCrl(const std::string& crl_path, const std::string& crl_pem, const std::string& ca_path,
                const std::vector<X509*>& cas, const std::string& cert_path, X509* own);

// A 0700 temporary directory holding the CRLs under their OpenSSL hash names; removed when the
// last TlsConfig holding it is destroyed (at the end of main; not on a crash or kill -9, which
// leaves a directory of public data in $TMPDIR).
class CrlDirectory {
 public:
  // Writes the CRLs of `crl_pem` (checked by CheckCrl) into a new directory.
  static Status Create(const std::string& crl_pem, std::shared_ptr<const CrlDirectory>* out);
  ~CrlDirectory();
  CrlDirectory(const CrlDirectory&) = delete;
  CrlDirectory& operator=(const CrlDirectory&) = delete;

  const std::string& path() const { return path_; }
  // Certificates the CRLs list, for the log.
  int revoked() const { return revoked_; }

 private:
  explicit CrlDirectory(std::string path) : path_(std::move(path)) {}
  std::string path_;
  int revoked_ = 0;
};

}  // namespace hvd::control
