#include "launcherd/kv_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "base/errno_text.h"

namespace hvd::launcherd::kvserver {
namespace {

using base::ErrnoText;

// Bytes read per recv: the payload grows by at most this much beyond what has arrived.
constexpr size_t kChunk = 64 << 10;

}  // namespace

Conn::~Conn() {
  if (fd >= 0) close(fd);
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
    ssize_t r = recv(c.fd, dst, room, 0);
    if (c.header_got == 4) {
      // Undo the part of the resize that did not fill.
      c.payload.resize(c.payload.size() - room + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    }
    if (r == 0) return ReadResult::kEof;
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadResult::kAgain;
      *error = "recv: " + ErrnoText(errno);
      return ReadResult::kError;
    }
    if (c.header_got < 4) {
      if (c.header_got == 0) c.frame_started = Clock::now();
      c.header_got += static_cast<size_t>(r);
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
    ssize_t w = send(c.fd, c.out.data() + c.out_done, c.out.size() - c.out_done, MSG_NOSIGNAL);
    if (w >= 0) {
      c.out_done += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
    *error = "send: " + ErrnoText(errno);
    return false;
  }
  c.out.clear();
  c.out.shrink_to_fit();
  c.out_done = 0;
  return true;
}

bool Drain(Conn& c) {
  char buf[4096];
  for (;;) {
    ssize_t r = recv(c.fd, buf, sizeof(buf), 0);
    if (r > 0) continue;
    if (r < 0 && errno == EINTR) continue;
    return !(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }
}

std::string Frame(const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string f(4, '\0');
  f[0] = static_cast<char>(n);
  f[1] = static_cast<char>(n >> 8);
  f[2] = static_cast<char>(n >> 16);
  f[3] = static_cast<char>(n >> 24);
  return f + payload;
}

}  // namespace hvd::launcherd::kvserver
