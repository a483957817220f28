// One connection of the rendezvous endpoint (kv_server.cc) as state for its event loop: the frame
// being received, the response being sent, and what the connection is doing. Internal to
// kv_server.cc; split out to keep the byte-level I/O apart from the protocol. With TLS
// (hvds://) the bytes go through the connection's non-blocking OpenSSL session, whose handshake
// comes first; the protocol above sees the same bytes either way.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <string>
#include <vector>

typedef struct ssl_st SSL;

namespace hvd::launcherd::kvserver {

using Clock = std::chrono::steady_clock;

enum class ConnState {
  kHello,    // accepted, waiting for HELLO
  kReady,    // authenticated, no request in flight
  kWaiting,  // parked in a WAIT
  kClosing,  // final frame queued; then its input is drained until EOF or a short linger
};

struct Conn {
  Conn(uint64_t id, int fd, std::string peer) : id(id), fd(fd), peer(std::move(peer)) {}
  ~Conn();  // frees ssl, closes fd
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  const uint64_t id;
  const int fd;
  const std::string peer;  // "ip:port", for logs and errors
  ConnState state = ConnState::kHello;
  std::string secret, prefix;  // once authenticated
  bool refused = false;        // answered at the connection cap; not counted against it
  SSL* ssl = nullptr;          // TLS session (owned); null: plain TCP
  bool handshaken = false;     // TLS handshake done (always true without TLS)
  bool tls_started = false;    // its first byte was seen to begin a TLS handshake

  // The frame being received: its header, then its payload, which grows as bytes arrive (never
  // sized from the header alone).
  unsigned char header[4] = {0, 0, 0, 0};
  size_t header_got = 0;
  uint32_t want = 0;  // payload length, once header_got == 4
  std::string payload;
  Clock::time_point frame_started;

  // The response being sent.
  std::string out;
  size_t out_done = 0;

  // The parked WAIT: `seq` tells its completion from a stale one of an earlier wait.
  uint64_t wait_id = 0, wait_seq = 0;
  std::vector<std::string> wait_keys;
  std::chrono::milliseconds wait_timeout{0};

  size_t charged = 0;          // bytes counted against the job's and the server's budgets
  Clock::time_point deadline;  // when the current state times out
  Clock::time_point timer_at = Clock::time_point::max();  // its entry in the timer set
  std::list<uint64_t>::iterator unauth_pos;               // in the server's unauthenticated list
  bool in_unauth = false;
  bool want_write = false;  // EPOLLOUT armed
};

enum class ReadResult {
  kAgain,   // nothing more to read now
  kFrame,   // conn.payload holds a whole frame (header_got reset for the next)
  kHeader,  // the header just arrived: check conn.want before reading on
  kEof,     // the peer closed its side
  kError,   // *error says why
};

enum class Handshake {
  kDone,       // c.handshaken is now true
  kWantRead,   // waiting for the peer
  kWantWrite,  // waiting for room in the socket
  kFailed,     // *error says why
};
// Moves the TLS handshake on as far as it goes without blocking.
// REQUIRES: c.ssl != nullptr and !c.handshaken.
Handshake HandshakeStep(Conn& c, std::string* error);

// Whether bytes arrived while a request is in flight: 1 (data: a protocol violation), 0 (the peer
// left or the connection failed), -1 (nothing to judge yet).
int PeekInFlight(Conn& c);

// Ends the sending side: TLS close_notify (best effort), then shutdown(SHUT_WR).
void ShutdownWrite(Conn& c);

// Reads the current frame's bytes that have arrived, stopping after the header so the caller can
// check the length. Never allocates more than has arrived (plus a little slack).
ReadResult ReadFrameBytes(Conn& c, std::string* error);

// Sends what is left of c.out. True when all of it has gone; false with *error empty when the
// socket is full, with *error set when the peer is gone.
bool WriteOut(Conn& c, std::string* error);

// Reads and discards what has arrived. True at EOF or error (the connection can be closed).
bool Drain(Conn& c);

}  // namespace hvd::launcherd::kvserver
