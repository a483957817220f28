// The rendezvous protocol between the runtime (libhvd.so) and hvd-launcherd's rendezvous endpoint:
// a small framed protocol over one TCP connection, because the runtime must not link gRPC or
// protobuf (it loads into processes that carry their own). docs/rendezvous.md is the reference.
//
//   frame    = u32 little-endian payload length + payload (at most kMaxFrameBytes)
//   request  = u8 op + the op's fields                     (base/wire.h encoding)
//   response = u8 StatusCode + message string + the op's result fields (only when the code is OK)
//
//   HELLO  secret                                  -> prefix this connection may use ("job/<id>/")
//   SET    key, value                              -> -
//   GET    key                                     -> value                (NOT_FOUND when absent)
//   WAIT   keys, timeout_ms                        -> -    (DEADLINE_EXCEEDED lists missing keys)
//   ADD    key, delta                              -> value
//   CAS    key, expect_absent, expected, desired   -> swapped, found, current
//
// HELLO must come first; a connection is then confined to its job's keys. Both sides use the
// helpers here: the runtime's client (runtime/rendezvous/tcp_store.cc) and launcherd/kv_server.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::base::kv {

// Bumped on an incompatible change; HELLO carries it so a mismatch fails with a clear message.
inline constexpr int32_t kProtocolVersion = 1;
// Rendezvous values are small (addresses, a 128-byte NCCL id); a bigger frame is a bug or garbage
// (for example an HTTP client dialing the wrong port), refused before allocating for it. The limits
// below are the launcher's (docs/rendezvous.md); the runtime's client only checks the frame size.
inline constexpr uint32_t kMaxFrameBytes = 4u << 20;
// Before HELLO succeeds a frame can only be a HELLO (a version and a secret): anything bigger is
// refused without reading it, so an unauthenticated peer costs the launcher at most this much.
inline constexpr uint32_t kMaxHelloFrameBytes = 4096;
inline constexpr size_t kMaxKeyBytes = 1024;
inline constexpr size_t kMaxValueBytes = 1u << 20;
inline constexpr size_t kMaxWaitKeys = 65536;  // keys named by one WAIT

// A frame the server sends on its own, outside the request/response sequence, starts with this
// byte where a response has its status code; then a message string. It means: the server closes
// this connection and did not process any request that crossed the notice (today only after
// the idle timeout), so the client may reconnect and send it again. Clients that predate it
// read it as a response with an unknown status code, which fails the call: still safe.
inline constexpr uint8_t kNoticeByte = 0xFF;
std::string EncodeNotice(const std::string& message);
// True when `payload` is a notice; *message gets its text.
bool DecodeNotice(std::string_view payload, std::string* message);

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kWait = 4,
  kAdd = 5,
  kCas = 6,
};

// "HELLO", "SET", ... ; "op <n>" for an unknown value.
std::string OpName(Op op);

// One request; only the fields of `op` are encoded.
struct Request {
  Op op = Op::kHello;
  int32_t version = kProtocolVersion;  // HELLO
  std::string secret;                  // HELLO
  std::string key;                     // SET GET ADD CAS
  std::string value;                   // SET
  std::vector<std::string> keys;       // WAIT
  int64_t timeout_ms = 0;              // WAIT
  int64_t delta = 0;                   // ADD
  bool expect_absent = false;          // CAS
  std::string expected;                // CAS
  std::string desired;                 // CAS
};

// One response; the result fields are encoded only when `status` is OK.
struct Response {
  Status status;
  std::string value;     // GET: the value; HELLO: the prefix granted
  int64_t number = 0;    // ADD: the new value
  bool swapped = false;  // CAS
  bool found = false;    // CAS
  std::string current;   // CAS
};

std::string EncodeRequest(const Request& request);
// InvalidArgument naming what was malformed (an unknown op, a short field, trailing bytes).
Status DecodeRequest(std::string_view payload, Request* request);
std::string EncodeResponse(Op op, const Response& response);
// The response to a request of `op`. Returns an error only when the payload is malformed; the
// server's own error travels in response->status.
Status DecodeResponse(Op op, std::string_view payload, Response* response);

using Deadline = std::chrono::steady_clock::time_point;

// Frame I/O on a non-blocking socket, bounded by `deadline` (Deadline::max(): none). A readable
// `cancel_fd` (>= 0) ends a blocked call with Cancelled. `peer` names the other side in errors.
// Writes use MSG_NOSIGNAL so a closed peer is an error, never SIGPIPE.
Status WriteFrame(int fd, std::string_view payload, Deadline deadline, int cancel_fd,
                  const std::string& peer);
// A peer that closes the connection gives Unavailable; a length over kMaxFrameBytes gives
// InvalidArgument (the stream cannot be resynchronized after it: close the connection).
Status ReadFrame(int fd, std::string* payload, Deadline deadline, int cancel_fd,
                 const std::string& peer);

// Blocks until `fd` has any of `events` (or an error or hangup, which the next syscall reports),
// the deadline passes (DeadlineExceeded "timed out <what> <peer>") or `cancel_fd` becomes
// readable (Cancelled). For frame I/O over another layer (the runtime's TLS channel).
Status WaitFd(int fd, short events, Deadline deadline, int cancel_fd, const std::string& peer,
              const char* what);

// `payload` behind its frame header (4 bytes, little-endian length): what goes on the wire.
// REQUIRES: payload.size() <= kMaxFrameBytes.
std::string EncodeFrame(std::string_view payload);

// The length in a frame header (4 bytes, little-endian).
uint32_t FrameLength(const unsigned char header[4]);
// InvalidArgument for a frame of `n` bytes over `limit`, in the words both sides use.
Status FrameTooBig(uint64_t n, uint64_t limit, const std::string& peer);

}  // namespace hvd::base::kv
