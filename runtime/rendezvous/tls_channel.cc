#include "rendezvous/tls_channel.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "base/errno_text.h"

#if HVD_RUNTIME_TLS
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#endif

namespace hvd::runtime::rendezvous {
namespace {

namespace kv = base::kv;

#if HVD_RUNTIME_TLS

// The first queued OpenSSL error, or errno's text, or the code; the queue cleared.
std::string SslError(int code) {
  char text[256] = "";
  if (unsigned long err = ERR_get_error()) ERR_error_string_n(err, text, sizeof text);
  ERR_clear_error();
  if (text[0] != '\0') return text;
  if (code == SSL_ERROR_SYSCALL && errno != 0) return base::ErrnoText(errno);
  if (code == SSL_ERROR_SYSCALL || code == SSL_ERROR_ZERO_RETURN) {
    return "the connection was closed";
  }
  return "TLS error " + std::to_string(code);
}

// A verification result that faults the CRLs given, not the launcher's certificate.
bool IsCrlError(long verify) {
  switch (verify) {
    case X509_V_ERR_UNABLE_TO_GET_CRL:
    case X509_V_ERR_UNABLE_TO_GET_CRL_ISSUER:
    case X509_V_ERR_UNABLE_TO_DECRYPT_CRL_SIGNATURE:
    case X509_V_ERR_CRL_SIGNATURE_FAILURE:
    case X509_V_ERR_CRL_NOT_YET_VALID:
    case X509_V_ERR_CRL_HAS_EXPIRED:
      return true;
    default:
      return false;
  }
}

// Whether an SSL call that returned `code` met the peer's end of the connection: close_notify, a
// plain EOF (OpenSSL 3 reports it as SSL_R_UNEXPECTED_EOF_WHILE_READING), or a reset. Such a
// connection may be retried; the error queue is left for SslError.
bool PeerClosed(int code) {
  if (code == SSL_ERROR_ZERO_RETURN) return true;
  if (code == SSL_ERROR_SYSCALL) return ERR_peek_error() == 0;
  return code == SSL_ERROR_SSL &&
         ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}

// OpenSSL writes to the socket with write(2): on a connection the launcher reset, that raises
// SIGPIPE, which kills a C or C++ rank (Python ignores it; the plain path sends with
// MSG_NOSIGNAL). Blocked on this thread around each SSL call; one raised meanwhile is taken
// before the old mask returns. Also clears the thread's OpenSSL error queue, which other users of
// OpenSSL in the process (PyTorch, Python's ssl) may have left non-empty: SSL_get_error would
// then report their error for ours.
class SslCall {
 public:
  SslCall() {
    ERR_clear_error();
    errno = 0;
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    pending_before_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SslCall() {
    const int saved = errno;
    sigset_t pending;
    if (!pending_before_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    errno = saved;
  }
  SslCall(const SslCall&) = delete;
  SslCall& operator=(const SslCall&) = delete;

 private:
  sigset_t pipe_, old_;
  bool pending_before_ = false;
};

class OpenSslChannel final : public TlsChannel {
 public:
  OpenSslChannel(SSL* ssl, int fd, std::string peer) : ssl_(ssl), fd_(fd), peer_(std::move(peer)) {}
  ~OpenSslChannel() override {
    // close_notify, best effort (the socket is non-blocking); never after an error, which
    // OpenSSL forbids and which would write to a reset connection.
    if (!broken_) {
      SslCall call;
      SSL_shutdown(ssl_);
    }
    ERR_clear_error();
    SSL_free(ssl_);
  }

  // Whether the connection failed (or never finished its handshake): then no close_notify.
  void set_broken(bool broken) { broken_ = broken; }

  Status WriteFrame(std::string_view payload, kv::Deadline deadline) override {
    if (payload.size() > kv::kMaxFrameBytes) {
      return kv::FrameTooBig(payload.size(), kv::kMaxFrameBytes, "this rank");
    }
    const std::string frame = kv::EncodeFrame(payload);
    size_t done = 0;
    while (done < frame.size()) {
      int w, e = 0;
      {
        SslCall call;
        w = SSL_write(ssl_, frame.data() + done,
                      static_cast<int>(std::min<size_t>(frame.size() - done, INT_MAX)));
        if (w <= 0) e = SSL_get_error(ssl_, w);
      }
      if (w > 0) {
        done += static_cast<size_t>(w);
        continue;
      }
      HVD_RETURN_IF_ERROR(Await(e, deadline, "writing to", true));
    }
    return Status::OK();
  }

  Status ReadFrame(std::string* payload, kv::Deadline deadline) override {
    unsigned char header[4];
    HVD_RETURN_IF_ERROR(ReadFull(reinterpret_cast<char*>(header), 4, deadline, false));
    const uint32_t n = kv::FrameLength(header);
    if (n > kv::kMaxFrameBytes) return kv::FrameTooBig(n, kv::kMaxFrameBytes, peer_);
    payload->resize(n);
    return ReadFull(payload->data(), n, deadline, true);
  }

  bool Readable() override {
    if (SSL_pending(ssl_) > 0) return true;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    char byte;
    SslCall call;
    const int r = SSL_peek(ssl_, &byte, 1);
    if (r > 0) return true;
    const int e = SSL_get_error(ssl_, r);
    ERR_clear_error();
    return e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
  }

 private:
  // After an SSL call failed with `code`: waits for what it wants, or the error naming the peer.
  Status Await(int code, kv::Deadline deadline, const char* what, bool frame_started) {
    if (code == SSL_ERROR_WANT_READ) return kv::WaitFd(fd_, POLLIN, deadline, -1, peer_, what);
    if (code == SSL_ERROR_WANT_WRITE) return kv::WaitFd(fd_, POLLOUT, deadline, -1, peer_, what);
    broken_ = true;
    if (PeerClosed(code)) {
      ERR_clear_error();
      return Unavailable("connection closed by " + peer_ +
                         (frame_started ? " in the middle of a message" : ""));
    }
    return Unavailable("TLS " + std::string(what) + " " + peer_ + ": " + SslError(code));
  }

  Status ReadFull(char* data, size_t n, kv::Deadline deadline, bool frame_started) {
    size_t done = 0;
    while (done < n) {
      int r, e = 0;
      {
        SslCall call;
        r = SSL_read(ssl_, data + done, static_cast<int>(std::min<size_t>(n - done, INT_MAX)));
        if (r <= 0) e = SSL_get_error(ssl_, r);
      }
      if (r > 0) {
        done += static_cast<size_t>(r);
        frame_started = true;
        continue;
      }
      HVD_RETURN_IF_ERROR(Await(e, deadline, "reading from", frame_started));
    }
    return Status::OK();
  }

  SSL* const ssl_;
  const int fd_;
  const std::string peer_;
  bool broken_ = false;
};

class OpenSslContext final : public TlsClientContext {
 public:
  OpenSslContext(SSL_CTX* ctx, std::string source) : ctx_(ctx), source_(std::move(source)) {}
  ~OpenSslContext() override { SSL_CTX_free(ctx_); }

  Status Connect(int fd, const std::string& host, const std::string& peer, kv::Deadline deadline,
                 std::unique_ptr<TlsChannel>* out) override {
    SSL* ssl = SSL_new(ctx_);
    if (ssl == nullptr) return Internal("TLS to " + peer + ": SSL_new: " + SslError(0));
    auto channel = std::make_unique<OpenSslChannel>(ssl, fd, peer);  // frees ssl on return
    channel->set_broken(true);                                       // until the handshake is done
    SSL_set_fd(ssl, fd);
    SSL_set_connect_state(ssl);
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    in_addr v4;
    in6_addr v6;
    const bool ip =
        inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
    if (ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
    } else {
      SSL_set_tlsext_host_name(ssl, host.c_str());
      X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
    for (;;) {
      int r, e = 0;
      {
        SslCall call;
        r = SSL_do_handshake(ssl);
        if (r != 1) e = SSL_get_error(ssl, r);
      }
      if (r == 1) break;
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        HVD_RETURN_IF_ERROR(kv::WaitFd(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline,
                                       -1, peer, "in the TLS handshake with"));
        continue;
      }
      const long verify = SSL_get_verify_result(ssl);
      if (PeerClosed(e)) {  // closed mid-handshake (at the launcher's cap, say): retried
        ERR_clear_error();
        return Unavailable("TLS handshake with " + peer + ": the connection was closed");
      }
      const bool protocol_error = e == SSL_ERROR_SSL;
      const std::string why = SslError(e);
      if (verify == X509_V_ERR_CERT_REVOKED) {
        return FailedPrecondition("TLS to " + peer +
                                  ": the launcher's certificate is revoked by HVD_RENDEZVOUS_CRL "
                                  "(the agent's --tls-crl); the launcher needs a new certificate");
      }
      if (IsCrlError(verify)) {
        return FailedPrecondition(
            "TLS to " + peer + ": HVD_RENDEZVOUS_CRL (the agent's --tls-crl) does not fit the CA " +
            "that signed the launcher's certificate (" + X509_verify_cert_error_string(verify) +
            "); give that CA's current CRL (scripts/gen-certs.sh --crl)");
      }
      if (verify != X509_V_OK) {
        return FailedPrecondition(
            "TLS to " + peer + ": the launcher's certificate did not verify (" +
            X509_verify_cert_error_string(verify) + "): it must be signed by a CA in " + source_ +
            " (hvd-agent passes its --tls-ca) and name '" + host +
            "', the host ranks dial (the launcher's --advertise-host; scripts/gen-certs.sh "
            "--hosts)");
      }
      if (protocol_error) {  // the same bytes would fail the same way again
        return FailedPrecondition(
            "TLS handshake with " + peer + " failed: " + why +
            "; does that endpoint speak TLS (a launcher started with --tls-cert)? Without TLS "
            "ranks dial hvd://, with it hvds://");
      }
      return Unavailable("TLS handshake with " + peer + " failed: " + why);
    }
    channel->set_broken(false);
    *out = std::move(channel);
    return Status::OK();
  }

 private:
  SSL_CTX* const ctx_;
  const std::string source_;
};

#endif  // HVD_RUNTIME_TLS

}  // namespace

Status TlsClientContext::New(const std::string& ca_pem, const std::string& source,
                             const std::string& crl_pem, std::shared_ptr<TlsClientContext>* out) {
#if HVD_RUNTIME_TLS
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return Internal("TLS: cannot create an OpenSSL context: " + SslError(0));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  BIO* bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  BIO_free(bio);
  ERR_clear_error();
  if (added == 0) {
    SSL_CTX_free(ctx);
    return InvalidArgument(source + " holds no PEM certificate (" + std::to_string(ca_pem.size()) +
                           " bytes); it must hold the cluster CA that signed the launcher's "
                           "certificate (hvd-agent sets it from its --tls-ca)");
  }
  if (!crl_pem.empty()) {
    BIO* crls = BIO_new_mem_buf(crl_pem.data(), static_cast<int>(crl_pem.size()));
    int crl_count = 0;
    while (X509_CRL* crl = PEM_read_bio_X509_CRL(crls, nullptr, nullptr, nullptr)) {
      if (X509_STORE_add_crl(store, crl) == 1) ++crl_count;
      X509_CRL_free(crl);
    }
    BIO_free(crls);
    ERR_clear_error();
    if (crl_count == 0) {
      SSL_CTX_free(ctx);
      return InvalidArgument(
          "HVD_RENDEZVOUS_CRL holds no PEM certificate revocation list; hvd-agent sets it from "
          "its --tls-crl");
    }
    X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK | X509_V_FLAG_CRL_CHECK_ALL);
  }
  *out = std::make_shared<OpenSslContext>(ctx, source);
  return Status::OK();
#else
  (void)ca_pem;
  (void)crl_pem;
  (void)out;
  return FailedPrecondition(
      "this libhvd was built without OpenSSL, so it cannot reach a TLS rendezvous (hvds://, " +
      source + "); rebuild hvd with libssl-dev installed, or run the launcher without --tls-cert");
#endif
}

}  // namespace hvd::runtime::rendezvous
