// The first bytes on every mesh connection, in both directions: who is calling, for which
// communicator. It lets an acceptor refuse a stray or stale connection (another job reusing the
// port, a rank of a different size or scope) and tells the connector why. The hello, the checks
// and the refusal codes are the core both transports share (transport/handshake.h); this is TCP's
// framing of it and the blocking exchange on a connected socket.
//
// Wire format (32 bytes, little-endian): magic u32 "HVDT", version u32, rank i32, size i32,
// scope hash u64 (FNV-1a of TcpOptions::scope), listen port u32, status u32 (0 = accepted;
// in a reply, a nonzero Refusal code).
#pragma once

#include <functional>
#include <string>

#include "hvd/status.h"
#include "transport/handshake.h"
#include "transport/tcp/socket_util.h"

namespace hvd::runtime::transport::tcp {

// This rank's hello.
Hello MakeHello(int rank, int size, const std::string& scope, int listen_port);

// Connector side: sends `mine`, reads the acceptor's reply and checks it is `expected_rank` of
// the same communicator. FailedPrecondition (not worth retrying) when refused or mismatched,
// naming `what` ("rank 0 (127.0.0.1:4711)") and both sides' values.
Status HandshakeAsConnector(int fd, const Hello& mine, int expected_rank, const std::string& what,
                            Deadline deadline, int cancel_fd);

// Acceptor side: reads the caller's hello, validates it against `mine` and `is_expected(rank)`
// (a higher rank not yet connected), and replies, with a refusal code when invalid. *peer receives
// the caller's hello. A refusal is FailedPrecondition naming `what` (the caller's ip:port) and why.
Status HandshakeAsAcceptor(int fd, const Hello& mine, const std::function<bool(int)>& is_expected,
                           const std::string& what, Deadline deadline, int cancel_fd, Hello* peer);

}  // namespace hvd::runtime::transport::tcp
