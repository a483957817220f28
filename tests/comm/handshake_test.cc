// The handshake core the TCP and shared-memory transports share (transport/handshake.h): every
// refusal code is decided by its check and explained with both sides' values, by the acceptor
// (naming the caller) and by the connector reading the reply (naming the peer). The transports'
// own tests (tcp_transport_test.cc, shm_transport_test.cc) run it over real connections.
#include "transport/handshake.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "testutil/expect.h"

namespace hvd::runtime::transport {
namespace {

// Rank 0 of 4 in "job/7" with two ranks on its host, as a shared-memory hello.
Hello Mine() {
  Hello h = MakeHello(kShmMagic, 0, 4, "job/7");
  h.ring_bytes = 1 << 20;
  h.local_size = 2;
  return h;
}

// A caller of the same communicator (rank 1).
Hello Caller() {
  Hello h = Mine();
  h.rank = 1;
  return h;
}

struct Case {
  Refusal code;
  std::function<void(Hello*)> spoil;  // makes a caller's hello earn `code`
  std::string reason;                 // what the explanation must say
};

std::vector<Case> Cases() {
  return {
      {Refusal::kBadMagic, [](Hello* h) { h->magic = 0x78787878; },
       "did not send an hvd shm handshake (magic 0x78787878)"},
      {Refusal::kBadVersion, [](Hello* h) { h->version = 9; },
       "protocol version 9, this rank speaks 3"},  // kShmHelloVersion
      {Refusal::kSizeMismatch, [](Hello* h) { h->size = 3; },
       "communicator size 3, this rank has size 4"},
      {Refusal::kScopeMismatch, [](Hello* h) { h->scope_hash = 0xabc; },
       "different scope (hash 0xabc"},
      {Refusal::kUnexpectedRank, [](Hello* h) { h->rank = 9; },
       "rank 9 is not expected to connect to rank 0"},
      {Refusal::kRingMismatch, [](Hello* h) { h->ring_bytes = 4096; },
       "rings have 4096 bytes, this rank's 1048576 (HVD_SHM_RING_BYTES differs)"},
      {Refusal::kLocalMismatch, [](Hello* h) { h->local_size = 3; },
       "counts 3 ranks on this host, this rank 2"},
  };
}

// Rank 9 is nobody this rank waits for; every other rank is.
bool ExpectedRank(int rank) {
  return rank != 9;
}

TEST(Handshake, CodesAreOneListForBothTransports) {
  // The values travel in replies: one enum, never renumbered per transport.
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kAccepted), 0u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kBadMagic), 1u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kBadVersion), 2u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kSizeMismatch), 3u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kScopeMismatch), 4u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kUnexpectedRank), 5u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kRingMismatch), 6u);
  EXPECT_EQ(static_cast<uint32_t>(Refusal::kLocalMismatch), 7u);
  EXPECT_EQ(Cases().size(), 7u) << "a case per refusal code";
}

TEST(Handshake, AnAgreeingCallerIsAccepted) {
  int asked = 0;
  const Refusal r = CheckCaller(Mine(), Caller(), [&](int rank) {
    ++asked;
    return rank == 1;
  });
  EXPECT_EQ(r, Refusal::kAccepted);
  EXPECT_EQ(asked, 1);
  // The acceptor's reply is its own hello with status 0: rank 1 takes it as rank 0's.
  const Status s = CheckReply(Caller(), Mine(), 0, "rank 0");
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(Handshake, EveryRefusalNamesTheCallerAndWhy) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(RefusalReason(c.code, Mine(), Caller()));
    Hello caller = Caller();
    c.spoil(&caller);
    int asked = 0;
    const Refusal r = CheckCaller(Mine(), caller, [&](int rank) {
      ++asked;
      return ExpectedRank(rank);
    });
    EXPECT_EQ(r, c.code);
    // Whether the rank is expected is asked only of a caller that agrees on everything else.
    EXPECT_EQ(asked, c.code == Refusal::kUnexpectedRank ? 1 : 0);
    const Status s = CallerRefused(r, Mine(), caller, "a local process (pid 42)");
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_HAS(s.message(), "refused shm connection from a local process (pid 42): ");
    EXPECT_HAS(s.message(), c.reason);
  }
}

TEST(Handshake, ARefusedReplyNamesThePeer) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(RefusalReason(c.code, Mine(), Caller()));
    // The acceptor (rank 0) refused this rank (1) with `c.code`.
    Hello reply = Mine();
    reply.status = static_cast<uint32_t>(c.code);
    const Status s = CheckReply(Caller(), reply, 0, "rank 0 (127.0.0.1:4711)");
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_HAS(s.message(), "shm handshake with rank 0 (127.0.0.1:4711): refused: ");
    if (c.code == Refusal::kUnexpectedRank) {
      EXPECT_HAS(s.message(), "it does not expect rank 1 (already connected, or two processes");
    }
  }
}

TEST(Handshake, AMismatchedReplyIsRefusedByTheConnectorToo) {
  for (const Case& c : Cases()) {
    if (c.code == Refusal::kUnexpectedRank) continue;  // about the caller: only the acceptor knows
    SCOPED_TRACE(RefusalReason(c.code, Mine(), Caller()));
    Hello reply = Caller();
    c.spoil(&reply);
    const Status s = CheckReply(Mine(), reply, 1, "rank 1");
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_HAS(s.message(), "shm handshake with rank 1: ");
    EXPECT_HAS(s.message(), c.reason);
  }
}

TEST(Handshake, AReplyFromAnotherRankNamesBoth) {
  Hello reply = Caller();
  reply.rank = 2;
  const Status s = CheckReply(Mine(), reply, 1, "rank 1 (127.0.0.1:4711)");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_HAS(s.message(), "shm handshake with rank 1 (127.0.0.1:4711): ");
  EXPECT_HAS(s.message(), "published for rank 1 answered as rank 2 (stale address");
}

TEST(Handshake, TcpAndShmHellosNeverAgree) {
  Hello tcp = MakeHello(kTcpMagic, 0, 4, "job/7");
  Hello shm = MakeHello(kShmMagic, 1, 4, "job/7");
  EXPECT_EQ(CheckHello(tcp, shm), Refusal::kBadMagic);
  EXPECT_EQ(CheckHello(shm, tcp), Refusal::kBadMagic);
  const Status s = CallerRefused(Refusal::kBadMagic, tcp, shm, "127.0.0.1:5000");
  EXPECT_HAS(s.message(),
             "refused tcp connection from 127.0.0.1:5000: the peer did not send an "
             "hvd tcp handshake (magic 0x53445648)");
  // Same scope, same hash; another scope, another.
  EXPECT_EQ(tcp.scope_hash, shm.scope_hash);
  EXPECT_NE(MakeHello(kTcpMagic, 0, 4, "job/8").scope_hash, tcp.scope_hash);
  // TCP's wire hello is unchanged (version 1); shared memory's grew to 48 bytes (version 2), then
  // its segment header gained the owner's CPU (version 3).
  EXPECT_EQ(tcp.version, 1u);
  EXPECT_EQ(shm.version, 3u);
}

TEST(Handshake, AnUnknownCodeIsNamed) {
  EXPECT_EQ(RefusalReason(static_cast<Refusal>(99), Mine(), Caller()), "unknown refusal code 99");
  EXPECT_EQ(ProtocolName(0x1234), "0x1234");
}

}  // namespace
}  // namespace hvd::runtime::transport
