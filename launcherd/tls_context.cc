#include "launcherd/tls_context.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>

#include "base/errno_text.h"

namespace hvd::launcherd {

Status NewServerTlsContext(const control::TlsConfig& tls, const std::string& what, SSL_CTX** out) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Internal(what + ": cannot create an OpenSSL context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  BIO* certs = BIO_new_mem_buf(tls.cert_pem.data(), static_cast<int>(tls.cert_pem.size()));
  BIO* key = BIO_new_mem_buf(tls.key_pem.data(), static_cast<int>(tls.key_pem.size()));
  bool ok = false;
  if (X509* leaf = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr)) {
    ok = SSL_CTX_use_certificate(ctx, leaf) == 1;
    X509_free(leaf);
    while (X509* extra = PEM_read_bio_X509(certs, nullptr, nullptr, nullptr)) {
      SSL_CTX_add_extra_chain_cert(ctx, extra);  // takes ownership
    }
  }
  if (EVP_PKEY* k = PEM_read_bio_PrivateKey(key, nullptr, nullptr, nullptr)) {
    ok = ok && SSL_CTX_use_PrivateKey(ctx, k) == 1;
    EVP_PKEY_free(k);
  } else {
    ok = false;
  }
  BIO_free(certs);
  BIO_free(key);
  ERR_clear_error();
  if (!ok) {
    SSL_CTX_free(ctx);
    return InvalidArgument(what + ": OpenSSL refused --tls-cert/--tls-key");  // LoadTls checked
  }
  *out = ctx;
  return Status::OK();
}

std::string TakeOpenSslError() {
  char text[256] = "";
  if (unsigned long err = ERR_get_error()) ERR_error_string_n(err, text, sizeof text);
  ERR_clear_error();
  return text;
}

std::string SslErrorText(int code) {
  const int saved = errno;
  std::string text = TakeOpenSslError();
  if (!text.empty()) return text;
  if (code == SSL_ERROR_SYSCALL && saved != 0) return base::ErrnoText(saved);
  return "TLS error " + std::to_string(code);
}

bool SslPeerClosed(int code) {
  if (code == SSL_ERROR_ZERO_RETURN) return true;
  if (code == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) return true;
  return ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}

void BlockSigpipeOnThisThread() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

}  // namespace hvd::launcherd
