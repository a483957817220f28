#include "control/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "control/tls_crl.h"

namespace hvd::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct StoreFree {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// "--tls-cert /etc/hvd/a.crt".
std::string Named(const char* flag, const std::string& path) {
  return std::string(flag) + " " + path;
}

Status ReadFile(const char* flag, const std::string& path, std::string* text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgument(Named(flag, path) + ": cannot read: " + std::strerror(errno));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  *text = buf.str();
  if (text->empty()) return InvalidArgument(Named(flag, path) + ": the file is empty");
  return Status::OK();
}

// Every certificate in `pem`, in order.
std::vector<Cert> ParseCerts(const std::string& pem) {
  std::vector<Cert> certs;
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) certs.emplace_back(x);
  ERR_clear_error();  // the read past the last one
  return certs;
}

std::string Subject(X509* cert) {
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf);
  return buf;
}

// Expired or not yet valid: the handshake would fail with "certificate verify failed" on the
// other side only, far from the file at fault.
Status CheckValidity(const char* flag, const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) <= 0) {
    return InvalidArgument(Named(flag, path) + ": the certificate (" + Subject(cert) +
                           ") has expired; issue a new one (scripts/gen-certs.sh)");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    return InvalidArgument(Named(flag, path) + ": the certificate (" + Subject(cert) +
                           ") is not valid yet; check this machine's clock");
  }
  return Status::OK();
}

Status CheckCa(const TlsFiles& f, const std::string& pem, std::vector<Cert>* cas) {
  *cas = ParseCerts(pem);
  if (cas->empty()) {
    return InvalidArgument(Named("--tls-ca", f.ca) +
                           ": no PEM certificate in it (expected \"-----BEGIN CERTIFICATE-----\"; "
                           "the cluster CA's ca.crt from scripts/gen-certs.sh)");
  }
  for (const Cert& c : *cas) HVD_RETURN_IF_ERROR(CheckValidity("--tls-ca", f.ca, c.get()));
  return Status::OK();
}

Status CheckCertAndKey(const TlsFiles& f, const std::string& cert_pem, const std::string& key_pem,
                       const std::vector<Cert>& cas, std::vector<Cert>* chain_out) {
  std::vector<Cert>& chain = *chain_out;
  chain = ParseCerts(cert_pem);
  if (chain.empty()) {
    return InvalidArgument(Named("--tls-cert", f.cert) +
                           ": no PEM certificate in it (expected \"-----BEGIN CERTIFICATE-----\")");
  }
  HVD_RETURN_IF_ERROR(CheckValidity("--tls-cert", f.cert, chain[0].get()));
  Bio bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return InvalidArgument(Named("--tls-key", f.key) +
                           ": no unencrypted PEM private key in it (expected \"-----BEGIN PRIVATE "
                           "KEY-----\"; a key with a passphrase is not supported)");
  }
  if (X509_check_private_key(chain[0].get(), key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument(Named("--tls-key", f.key) + " does not match " +
                           Named("--tls-cert", f.cert) + " (" + Subject(chain[0].get()) +
                           "): give the key the certificate was issued for");
  }
  // Signed by the CA the rest of the cluster trusts? Otherwise every peer refuses it.
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const Cert& c : cas) X509_STORE_add_cert(store.get(), c.get());
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted, chain[i].get());
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), chain[0].get(), untrusted);
  const bool verified = X509_verify_cert(ctx.get()) == 1;
  const int err = X509_STORE_CTX_get_error(ctx.get());
  sk_X509_free(untrusted);
  ERR_clear_error();
  if (!verified) {
    return InvalidArgument(Named("--tls-cert", f.cert) + " (" + Subject(chain[0].get()) +
                           ") does not verify against " + Named("--tls-ca", f.ca) + ": " +
                           X509_verify_cert_error_string(err) +
                           "; every host's certificate must be signed by the one cluster CA");
  }
  return Status::OK();
}

}  // namespace

Status LoadTls(const TlsFiles& files, TlsRole role, TlsConfig* out) {
  *out = TlsConfig();
  if (files.empty()) return Status::OK();
  const bool needs_cert = role != TlsRole::kClient;
  if (files.ca.empty()) {
    return InvalidArgument(
        "TLS needs --tls-ca, the cluster CA certificate (ca.crt from scripts/gen-certs.sh), to "
        "verify the other side; give it with --tls-cert and --tls-key, or none of the three for "
        "plain TCP");
  }
  if (needs_cert && (files.cert.empty() || files.key.empty())) {
    return InvalidArgument(std::string("TLS needs --tls-cert and --tls-key here: ") +
                           (role == TlsRole::kServer
                                ? "the launcher's certificate and key"
                                : "the agent's client certificate and key (the launcher takes "
                                  "agents with a certificate of the cluster CA only)"));
  }
  if (files.cert.empty() != files.key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key go together: give both or neither");
  }
  TlsConfig cfg;
  HVD_RETURN_IF_ERROR(ReadFile("--tls-ca", files.ca, &cfg.ca_pem));
  std::vector<Cert> cas;
  HVD_RETURN_IF_ERROR(CheckCa(files, cfg.ca_pem, &cas));
  std::vector<Cert> chain;
  if (!files.cert.empty()) {
    HVD_RETURN_IF_ERROR(ReadFile("--tls-cert", files.cert, &cfg.cert_pem));
    HVD_RETURN_IF_ERROR(ReadFile("--tls-key", files.key, &cfg.key_pem));
    HVD_RETURN_IF_ERROR(CheckCertAndKey(files, cfg.cert_pem, cfg.key_pem, cas, &chain));
    // As the token file: a key others can read is everyone's.
    struct stat st;
    if (stat(files.key.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
      return InvalidArgument(Named("--tls-key", files.key) +
                             " is accessible by group or others; run: chmod 600 " + files.key);
    }
  }
  if (!files.crl.empty()) {
    HVD_RETURN_IF_ERROR(ReadFile("--tls-crl", files.crl, &cfg.crl_pem));
    std::vector<X509*> ca_ptrs;
    for (const Cert& c : cas) ca_ptrs.push_back(c.get());
    HVD_RETURN_IF_ERROR(CheckCrl(files.crl, cfg.crl_pem, files.ca, ca_ptrs, files.cert,
                                 chain.empty() ? nullptr : chain[0].get()));
    HVD_RETURN_IF_ERROR(CrlDirectory::Create(cfg.crl_pem, &cfg.crl_dir));
  }
  *out = std::move(cfg);
  return Status::OK();
}

void TlsFilesFromEnvironment(TlsFiles* files) {
  const std::pair<std::string*, const char*> vars[] = {{&files->cert, "HVD_TLS_CERT"},
                                                       {&files->key, "HVD_TLS_KEY"},
                                                       {&files->ca, "HVD_TLS_CA"},
                                                       {&files->crl, "HVD_TLS_CRL"}};
  for (const auto& [field, name] : vars) {
    const char* v = std::getenv(name);
    if (field->empty() && v != nullptr) *field = v;
  }
}

std::string TlsFailureHint(const std::string& message, bool tls) {
  auto has = [&](const char* s) { return message.find(s) != std::string::npos; };
  if (tls) {
    if (has("alert certificate revoked")) {
      return "the launcher refused this program's certificate as revoked (the CRL of its "
             "--tls-crl lists it): this host needs a new certificate (scripts/gen-certs.sh)";
    }
    if (has("alert unknown ca") || has("alert bad certificate") ||
        has("alert certificate required") || has("alert handshake failure")) {
      return "the launcher refused this program's certificate: --tls-cert must be signed by "
             "the CA the launcher was given (its --tls-ca)";
    }
    if (has("certificate verify failed") || has("CERTIFICATE_VERIFY_FAILED")) {
      return "the launcher's certificate did not verify: --tls-ca must be the CA that signed the "
             "launcher's certificate (ca.crt from scripts/gen-certs.sh); with --tls-crl it may "
             "also be revoked (gRPC then logs \"Certificate verify failed with code 23\" here)";
    }
    if (has("Peer name") || has("peer name") || has("check_peer") ||
        has("Hostname Verification")) {  // the last: TlsCredentials (--tls-crl)
      return "the launcher's certificate does not name the host in --launcher: use a host name "
             "or address it was issued for (scripts/gen-certs.sh --hosts)";
    }
    if (has("Handshake read failed")) {
      // gRPC's summary when either side refused the other's certificate; its own log line (on
      // this side, "gRPC: Handshake failed ... certificate verify failed") says which.
      return "the TLS handshake with the launcher failed: --tls-ca must be the CA that signed the "
             "launcher's certificate, and --tls-cert one signed by the launcher's --tls-ca (and "
             "not revoked by its --tls-crl); a \"certificate verify failed\" line from gRPC here "
             "means the former";
    }
    if (has("wrong version number") || has("packet length too long") ||
        has("Ssl handshake failed") || has("Handshake failed")) {
      // After the checks above: a refused certificate reads "Ssl handshake failed" too.
      return "the TLS handshake failed: is the launcher started with --tls-cert? (a launcher "
             "without TLS speaks plain TCP; then drop --tls-ca and the other --tls-* flags)";
    }
    if (has("no RegisterAck within")) {
      // An agent reconnecting on a channel whose handshakes the launcher now refuses (restarted
      // with --tls-crl, or another CA): the call waits for a channel that never becomes ready.
      return "either the launcher is down or unreachable (stopped, hung, or packets to it "
             "dropped), or it refuses this program's certificate, which with TLS looks the same: "
             "--tls-cert must be signed by the launcher's --tls-ca and, if the launcher has "
             "--tls-crl, not revoked (the launcher's log then says \"Certificate verify failed\"; "
             "\"with code 23\": revoked)";
    }
    if (has("Socket closed") || has("Connection reset") || has("connection reset")) {
      // With TLS 1.3 the launcher's refusal of a client certificate comes after the client's
      // side of the handshake: the client sees the connection closed, nothing more.
      return "the launcher closed the TLS connection: if this program presents --tls-cert, it "
             "must be signed by the CA the launcher was given (its --tls-ca) and, if the launcher "
             "has --tls-crl, not revoked; the launcher's log says \"certificate verify failed\" "
             "then (\"with code 23\": revoked)";
    }
    return "";
  }
  // Refused connections are no TLS mismatch: nothing listens there.
  if (has("Connection refused")) return "";
  if (has("Socket closed") || has("Connection reset") || has("connection reset") ||
      has("failed to connect to all addresses") || has("Stream removed")) {
    return "if the launcher uses TLS (hvd-launcherd --tls-cert), pass --tls-ca (and for agents "
           "--tls-cert and --tls-key) here too";
  }
  return "";
}

}  // namespace hvd::control
