#include "base/kv_protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "base/errno_text.h"
#include "base/wire.h"

namespace hvd::base::kv {
namespace {

constexpr uint8_t kMaxStatusCode = static_cast<uint8_t>(StatusCode::kCancelled);

// "4 MiB", "4096 bytes": limits as the docs write them.
std::string Size(uint64_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

Status ReadFull(int fd, char* data, size_t n, Deadline deadline, int cancel_fd,
                const std::string& peer, bool frame_started) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = recv(fd, data + done, n - done, 0);
    if (r > 0) {
      done += static_cast<size_t>(r);
      frame_started = true;
      continue;
    }
    if (r == 0) {
      return Unavailable("connection closed by " + peer +
                         (frame_started ? " in the middle of a message" : ""));
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("recv from " + peer + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, cancel_fd, peer, "reading from"));
  }
  return Status::OK();
}

bool Bool(Decoder& d, bool* out) {
  uint8_t v = 0;
  if (!d.U8(&v)) return false;
  *out = v != 0;
  return true;
}

}  // namespace

// (kv_protocol.h)
// Blocks until `fd` has any of `events` (or an error or hangup, which the next syscall reports),
// the deadline passes or `cancel_fd` becomes readable.
Status WaitFd(int fd, short events, Deadline deadline, int cancel_fd, const std::string& peer,
              const char* what) {
  for (;;) {
    int timeout_ms = -1;
    if (deadline != Deadline::max()) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return DeadlineExceeded(std::string("timed out ") + what + " " + peer);
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), INT_MAX));
    }
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    int r = poll(fds, cancel_fd >= 0 ? 2 : 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      return Internal(std::string("poll while ") + what + " " + peer + ": " + ErrnoText(errno));
    if (cancel_fd >= 0 && fds[1].revents != 0) {
      return Status(StatusCode::kCancelled, std::string("cancelled while ") + what + " " + peer);
    }
    if (fds[0].revents != 0) return Status::OK();
  }
}

std::string OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kWait:
      return "WAIT";
    case Op::kAdd:
      return "ADD";
    case Op::kCas:
      return "CAS";
  }
  return "op " + std::to_string(static_cast<int>(op));
}

std::string EncodeRequest(const Request& r) {
  Encoder e;
  e.U8(static_cast<uint8_t>(r.op));
  switch (r.op) {
    case Op::kHello:
      e.I32(r.version);
      e.Str(r.secret);
      break;
    case Op::kSet:
      e.Str(r.key);
      e.Str(r.value);
      break;
    case Op::kGet:
      e.Str(r.key);
      break;
    case Op::kWait:
      e.U64(r.keys.size());
      for (const auto& k : r.keys) e.Str(k);
      e.I64(r.timeout_ms);
      break;
    case Op::kAdd:
      e.Str(r.key);
      e.I64(r.delta);
      break;
    case Op::kCas:
      e.Str(r.key);
      e.U8(r.expect_absent ? 1 : 0);
      e.Str(r.expected);
      e.Str(r.desired);
      break;
  }
  return e.Release();
}

Status DecodeRequest(std::string_view payload, Request* r) {
  Decoder d(payload);
  uint8_t op = 0;
  if (!d.U8(&op)) return InvalidArgument("rendezvous request: empty message");
  r->op = static_cast<Op>(op);
  uint64_t n = 0;
  switch (r->op) {
    case Op::kHello:
      d.I32(&r->version);
      d.Str(&r->secret);
      break;
    case Op::kSet:
      d.Str(&r->key);
      d.Str(&r->value);
      break;
    case Op::kGet:
      d.Str(&r->key);
      break;
    case Op::kWait:
      if (d.Count(&n, sizeof(uint64_t))) {
        if (n > kMaxWaitKeys) {
          return InvalidArgument("rendezvous WAIT request names " + std::to_string(n) +
                                 " keys, over the limit of " + std::to_string(kMaxWaitKeys));
        }
        r->keys.resize(n);
        for (auto& k : r->keys) d.Str(&k);
      }
      d.I64(&r->timeout_ms);
      break;
    case Op::kAdd:
      d.Str(&r->key);
      d.I64(&r->delta);
      break;
    case Op::kCas:
      d.Str(&r->key);
      Bool(d, &r->expect_absent);
      d.Str(&r->expected);
      d.Str(&r->desired);
      break;
    default:
      return InvalidArgument("rendezvous request: unknown op " + std::to_string(op) +
                             " (this endpoint speaks protocol version " +
                             std::to_string(kProtocolVersion) + ")");
  }
  const std::string what = "rendezvous " + OpName(r->op) + " request";
  if (!d.ok()) return InvalidArgument(d.status(what).message());
  if (!d.done()) return InvalidArgument(what + ": unexpected bytes after the last field");
  return Status::OK();
}

std::string EncodeResponse(Op op, const Response& r) {
  Encoder e;
  e.U8(static_cast<uint8_t>(r.status.code()));
  e.Str(r.status.message());
  if (!r.status.ok()) return e.Release();
  switch (op) {
    case Op::kHello:
    case Op::kGet:
      e.Str(r.value);
      break;
    case Op::kAdd:
      e.I64(r.number);
      break;
    case Op::kCas:
      e.U8(r.swapped ? 1 : 0);
      e.U8(r.found ? 1 : 0);
      e.Str(r.current);
      break;
    case Op::kSet:
    case Op::kWait:
      break;
  }
  return e.Release();
}

Status DecodeResponse(Op op, std::string_view payload, Response* r) {
  Decoder d(payload);
  uint8_t code = 0;
  std::string message;
  d.U8(&code);
  d.Str(&message);
  const std::string what = "rendezvous " + OpName(op) + " response";
  if (d.ok() && code > kMaxStatusCode) {
    return Internal(what + ": unknown status code " + std::to_string(code));
  }
  r->status = Status(static_cast<StatusCode>(code), std::move(message));
  if (d.ok() && r->status.ok()) {
    switch (op) {
      case Op::kHello:
      case Op::kGet:
        d.Str(&r->value);
        break;
      case Op::kAdd:
        d.I64(&r->number);
        break;
      case Op::kCas:
        Bool(d, &r->swapped);
        Bool(d, &r->found);
        d.Str(&r->current);
        break;
      case Op::kSet:
      case Op::kWait:
        break;
    }
  }
  HVD_RETURN_IF_ERROR(d.status(what));
  if (!d.done()) return Internal(what + ": unexpected bytes after the last field");
  return Status::OK();
}

Status WriteFrame(int fd, std::string_view payload, Deadline deadline, int cancel_fd,
                  const std::string& peer) {
  if (payload.size() > kMaxFrameBytes) {
    return InvalidArgument("a rendezvous message of " + std::to_string(payload.size()) +
                           " bytes exceeds the protocol's limit of " + Size(kMaxFrameBytes) +
                           "; the rendezvous store is for small values (addresses, ids)");
  }
  const std::string frame = EncodeFrame(payload);
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t w = send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (w >= 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Unavailable("send to " + peer + ": " + ErrnoText(errno));
    }
    HVD_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, cancel_fd, peer, "writing to"));
  }
  return Status::OK();
}

Status ReadFrame(int fd, std::string* payload, Deadline deadline, int cancel_fd,
                 const std::string& peer) {
  unsigned char header[4];
  HVD_RETURN_IF_ERROR(ReadFull(fd, reinterpret_cast<char*>(header), sizeof(header), deadline,
                               cancel_fd, peer, false));
  const uint32_t n = FrameLength(header);
  if (n > kMaxFrameBytes) return FrameTooBig(n, kMaxFrameBytes, peer);
  payload->resize(n);
  return ReadFull(fd, payload->data(), n, deadline, cancel_fd, peer, true);
}

std::string EncodeFrame(std::string_view payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string frame(4 + payload.size(), '\0');
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>(n >> (8 * i));
  std::memcpy(frame.data() + 4, payload.data(), payload.size());
  return frame;
}

uint32_t FrameLength(const unsigned char header[4]) {
  return header[0] | (uint32_t{header[1]} << 8) | (uint32_t{header[2]} << 16) |
         (uint32_t{header[3]} << 24);
}

Status FrameTooBig(uint64_t n, uint64_t limit, const std::string& peer) {
  return InvalidArgument("a message of " + std::to_string(n) + " bytes from " + peer +
                         " exceeds the rendezvous protocol's limit of " + Size(limit) +
                         "; is the peer speaking the hvd rendezvous protocol?");
}

std::string EncodeNotice(const std::string& message) {
  Encoder e;
  e.U8(kNoticeByte);
  e.Str(message);
  return e.Release();
}

bool DecodeNotice(std::string_view payload, std::string* message) {
  if (payload.empty() || static_cast<uint8_t>(payload[0]) != kNoticeByte) return false;
  Decoder d(payload.substr(1));
  if (!d.Str(message)) message->assign("(unreadable notice)");
  return true;
}

}  // namespace hvd::base::kv
