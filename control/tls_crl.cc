#include "control/tls_crl.h"

#include <dirent.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

namespace hvd::control {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct CrlFree {
  void operator()(X509_CRL* c) const { X509_CRL_free(c); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Crl = std::unique_ptr<X509_CRL, CrlFree>;

std::vector<Crl> ParseCrls(const std::string& pem) {
  std::vector<Crl> crls;
  Bio bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  while (X509_CRL* c = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr)) {
    crls.emplace_back(c);
  }
  ERR_clear_error();  // the read past the last one
  return crls;
}

std::string NameText(const X509_NAME* name) {
  char buf[256];
  X509_NAME_oneline(name, buf, sizeof buf);
  return buf;
}

std::string TimeText(const ASN1_TIME* t) {
  Bio bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), t);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

std::string SerialText(const ASN1_INTEGER* serial) {
  BIGNUM* bn = ASN1_INTEGER_to_BN(serial, nullptr);
  char* hex = bn != nullptr ? BN_bn2hex(bn) : nullptr;
  std::string out = hex != nullptr ? hex : "?";
  OPENSSL_free(hex);
  BN_free(bn);
  return out;
}

const char kRefresh[] =
    "write a fresh one with scripts/gen-certs.sh --out DIR --crl (DIR: where ca.key is) and "
    "copy DIR/ca.crl to every host";

}  // namespace

Status CheckCrl(const std::string& crl_path, const std::string& crl_pem, const std::string& ca_path,
                const std::vector<X509*>& cas, const std::string& cert_path, X509* own) {
  const std::string named = "--tls-crl " + crl_path;
  std::vector<Crl> crls = ParseCrls(crl_pem);
  if (crls.empty()) {
    return InvalidArgument(named +
                           ": no PEM CRL in it (expected \"-----BEGIN X509 CRL-----\"; the "
                           "cluster CA's ca.crl from scripts/gen-certs.sh)");
  }
  for (const Crl& crl : crls) {
    const X509_NAME* issuer = X509_CRL_get_issuer(crl.get());
    bool signed_by_ca = false;
    for (X509* ca : cas) {
      if (X509_NAME_cmp(issuer, X509_get_subject_name(ca)) != 0) continue;
      EVP_PKEY* key = X509_get0_pubkey(ca);
      if (key != nullptr && X509_CRL_verify(crl.get(), key) == 1) signed_by_ca = true;
    }
    ERR_clear_error();
    if (!signed_by_ca) {
      return InvalidArgument(named + ": its CRL (issuer " + NameText(issuer) +
                             ") was not issued by a CA of --tls-ca " + ca_path +
                             "; give the CRL of the cluster CA (ca.crl next to its ca.crt)");
    }
    const ASN1_TIME* next = X509_CRL_get0_nextUpdate(crl.get());
    if (next != nullptr && X509_cmp_current_time(next) <= 0) {
      return InvalidArgument(named + ": the CRL is past its nextUpdate (" + TimeText(next) +
                             "), so TLS would refuse every certificate of its CA; " + kRefresh);
    }
    const ASN1_TIME* last = X509_CRL_get0_lastUpdate(crl.get());
    if (last != nullptr && X509_cmp_current_time(last) > 0) {
      return InvalidArgument(named + ": the CRL is not valid yet (lastUpdate " + TimeText(last) +
                             "); check this machine's clock");
    }
    // This process's own certificate revoked: every peer with the CRL would refuse it, with a
    // handshake error on their side only.
    if (own == nullptr || X509_NAME_cmp(issuer, X509_get_issuer_name(own)) != 0) continue;
    X509_REVOKED* entry = nullptr;
    if (X509_CRL_get0_by_cert(crl.get(), &entry, own) == 1 && entry != nullptr) {
      return InvalidArgument(
          "--tls-cert " + cert_path + " (" + NameText(X509_get_subject_name(own)) + ", serial " +
          SerialText(X509_get0_serialNumber(own)) + ") is revoked by " + named + " (since " +
          TimeText(X509_REVOKED_get0_revocationDate(entry)) +
          "): issue this host a new certificate (scripts/gen-certs.sh --out DIR --hosts HOST)");
    }
  }
  return Status::OK();
}

Status CrlDirectory::Create(const std::string& crl_pem, std::shared_ptr<const CrlDirectory>* out) {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hvd-crl.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {  // mode 0700
    return Internal("--tls-crl: cannot make a private directory for the CRL (" + tmpl +
                    "): " + std::strerror(errno) + "; set TMPDIR to a writable directory");
  }
  auto* made = new CrlDirectory(tmpl);
  std::shared_ptr<const CrlDirectory> dir(made);
  std::map<unsigned long, int> next_index;  // CRLs of one issuer are .r0, .r1, ...
  for (const Crl& crl : ParseCrls(crl_pem)) {
    // A CRL that revokes nothing has no list at all: OpenSSL counts that as -1.
    made->revoked_ += std::max(0, sk_X509_REVOKED_num(X509_CRL_get_REVOKED(crl.get())));
    const unsigned long hash = X509_NAME_hash(X509_CRL_get_issuer(crl.get()));
    char name[32];
    std::snprintf(name, sizeof name, "/%08lx.r%d", hash, next_index[hash]++);
    const std::string file = tmpl + name;
    FILE* f = std::fopen(file.c_str(), "w");
    const bool written = f != nullptr && PEM_write_X509_CRL(f, crl.get()) == 1;
    const bool closed = f != nullptr && std::fclose(f) == 0;
    if (!written || !closed) {
      ERR_clear_error();
      return Internal("--tls-crl: cannot write " + file + ": " + std::strerror(errno));
    }
  }
  *out = std::move(dir);
  return Status::OK();
}

CrlDirectory::~CrlDirectory() {
  if (DIR* d = opendir(path_.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        unlink((path_ + "/" + e->d_name).c_str());
      }
    }
    closedir(d);
  }
  rmdir(path_.c_str());
}

}  // namespace hvd::control
