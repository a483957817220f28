// An OpenSSL server context from the launcher's checked TLS material (control/tls.h), shared by
// the two endpoints that terminate TLS themselves: HTTPS for REST (https_front.cc) and the hvd://
// rendezvous endpoint (kv_server.cc). gRPC builds its own (control/tls_grpc.h).
#pragma once

#include <openssl/ssl.h>

#include <string>

#include "control/tls.h"
#include "hvd/status.h"

namespace hvd::launcherd {

// TLS 1.2 or later, tls.cert_pem (and any chain after the leaf) with tls.key_pem, partial and
// moving writes for non-blocking sockets, read buffers released while a connection is idle (a
// parked rendezvous wait then costs no 16 KiB buffer), and no session tickets (clients connect
// once; a ticket would be an unread record a client mistakes for a message). `what` prefixes the
// error ("HTTPS", "rendezvous endpoint"). *out is the caller's to SSL_CTX_free.
// REQUIRES: tls.enabled(), checked by control::LoadTls for TlsRole::kServer.
Status NewServerTlsContext(const control::TlsConfig& tls, const std::string& what, SSL_CTX** out);

// The text of the first queued OpenSSL error ("" when none), and the queue cleared: for a log
// line that names why a handshake failed.
std::string TakeOpenSslError();

// After an SSL call failed with SSL_get_error's `code`: TakeOpenSslError, else errno's text for
// a failed syscall, else the code.
std::string SslErrorText(int code);

// Whether that failure is the peer's end of the connection: close_notify, a plain EOF (OpenSSL 3
// reports it as SSL_R_UNEXPECTED_EOF_WHILE_READING) or a reset. Leaves the error queue as it is.
bool SslPeerClosed(int code);

// OpenSSL writes with write(2): a peer that reset its connection must cost an EPIPE on the
// calling thread, never SIGPIPE for the process (hvdrun embeds the launcher). For the threads
// that run TLS endpoints, at their start.
void BlockSigpipeOnThisThread();

}  // namespace hvd::launcherd
