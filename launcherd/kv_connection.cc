#include "launcherd/kv_connection.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/errno_text.h"
#include "launcherd/tls_context.h"

namespace hvd::launcherd::kvserver {
namespace {

using base::ErrnoText;

// Bytes read per recv: the payload grows by at most this much beyond what has arrived.
constexpr size_t kChunk = 64 << 10;

enum class Io { kOk, kAgain, kEof, kError };

// One recv (or SSL_read) of at most `room` bytes into `dst`.
Io ReadSome(Conn& c, char* dst, size_t room, size_t* got, std::string* error) {
  *got = 0;
  if (c.ssl == nullptr) {
    for (;;) {
      const ssize_t r = recv(c.fd, dst, room, 0);
      if (r > 0) {
        *got = static_cast<size_t>(r);
        return Io::kOk;
      }
      if (r == 0) return Io::kEof;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
      *error = "recv: " + ErrnoText(errno);
      return Io::kError;
    }
  }
  ERR_clear_error();  // SSL_get_error reads the queue: only this call's errors may be in it
  errno = 0;
  const int r = SSL_read(c.ssl, dst, static_cast<int>(std::min<size_t>(room, 1 << 30)));
  if (r > 0) {
    *got = static_cast<size_t>(r);
    return Io::kOk;
  }
  const int e = SSL_get_error(c.ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Io::kAgain;
  if (SslPeerClosed(e)) {
    ERR_clear_error();
    return Io::kEof;
  }
  *error = "TLS read: " + SslErrorText(e);
  return Io::kError;
}

Io WriteSome(Conn& c, const char* src, size_t n, size_t* sent, std::string* error) {
  *sent = 0;
  if (c.ssl == nullptr) {
    for (;;) {
      const ssize_t w = send(c.fd, src, n, MSG_NOSIGNAL);
      if (w >= 0) {
        *sent = static_cast<size_t>(w);
        return Io::kOk;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
      *error = "send: " + ErrnoText(errno);
      return Io::kError;
    }
  }
  if (!c.handshaken) return Io::kAgain;  // the reply goes out once the handshake is done
  ERR_clear_error();
  errno = 0;
  const int w = SSL_write(c.ssl, src, static_cast<int>(std::min<size_t>(n, 1 << 30)));
  if (w > 0) {
    *sent = static_cast<size_t>(w);
    return Io::kOk;
  }
  const int e = SSL_get_error(c.ssl, w);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return Io::kAgain;
  *error = "TLS write: " + SslErrorText(e);
  return Io::kError;
}

}  // namespace

Conn::~Conn() {
  if (ssl != nullptr) SSL_free(ssl);
  if (fd >= 0) close(fd);
}

Handshake HandshakeStep(Conn& c, std::string* error) {
  ERR_clear_error();
  errno = 0;
  const int r = SSL_do_handshake(c.ssl);
  if (r == 1) {
    c.handshaken = true;
    return Handshake::kDone;
  }
  const int e = SSL_get_error(c.ssl, r);
  if (e == SSL_ERROR_WANT_READ) return Handshake::kWantRead;
  if (e == SSL_ERROR_WANT_WRITE) return Handshake::kWantWrite;
  *error = SslPeerClosed(e) ? std::string("the peer closed the connection") : SslErrorText(e);
  return Handshake::kFailed;
}

int PeekInFlight(Conn& c) {
  char byte;
  if (c.ssl == nullptr) {
    const ssize_t r = recv(c.fd, &byte, 1, MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
    return r > 0 ? 1 : 0;
  }
  ERR_clear_error();
  const int r = SSL_peek(c.ssl, &byte, 1);
  if (r > 0) return 1;
  const int e = SSL_get_error(c.ssl, r);
  ERR_clear_error();
  return (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) ? -1 : 0;
}

void ShutdownWrite(Conn& c) {
  if (c.ssl != nullptr && c.handshaken) {
    SSL_shutdown(c.ssl);  // queues close_notify; its answer is not awaited
    ERR_clear_error();
  }
  shutdown(c.fd, SHUT_WR);
}

ReadResult ReadFrameBytes(Conn& c, std::string* error) {
  for (;;) {
    char* dst;
    size_t room;
    if (c.header_got < 4) {
      dst = reinterpret_cast<char*>(c.header) + c.header_got;
      room = 4 - c.header_got;
    } else {
      if (c.payload.size() == c.want) {
        c.header_got = 0;
        return ReadResult::kFrame;
      }
      const size_t have = c.payload.size();
      room = std::min<size_t>(c.want - have, kChunk);
      c.payload.resize(have + room);  // at most kChunk past what has arrived
      dst = c.payload.data() + have;
    }
    size_t r = 0;
    const Io io = ReadSome(c, dst, room, &r, error);
    if (c.header_got == 4) {
      // Undo the part of the resize that did not fill.
      c.payload.resize(c.payload.size() - room + r);
    }
    if (io == Io::kEof) return ReadResult::kEof;
    if (io == Io::kAgain) return ReadResult::kAgain;
    if (io == Io::kError) return ReadResult::kError;
    if (c.header_got < 4) {
      if (c.header_got == 0) c.frame_started = Clock::now();
      c.header_got += r;
      if (c.header_got == 4) {
        c.want = c.header[0] | (uint32_t{c.header[1]} << 8) | (uint32_t{c.header[2]} << 16) |
                 (uint32_t{c.header[3]} << 24);
        c.payload.clear();
        return ReadResult::kHeader;
      }
    }
  }
}

bool WriteOut(Conn& c, std::string* error) {
  while (c.out_done < c.out.size()) {
    size_t sent = 0;
    const Io io = WriteSome(c, c.out.data() + c.out_done, c.out.size() - c.out_done, &sent, error);
    if (io != Io::kOk) return false;  // kAgain: the socket is full; kError: *error says why
    c.out_done += sent;
  }
  c.out.clear();
  c.out.shrink_to_fit();
  c.out_done = 0;
  return true;
}

bool Drain(Conn& c) {
  char buf[4096];
  for (;;) {
    size_t got = 0;
    std::string error;
    const Io io = ReadSome(c, buf, sizeof(buf), &got, &error);
    if (io == Io::kOk) continue;
    return io != Io::kAgain;
  }
}

}  // namespace hvd::launcherd::kvserver
