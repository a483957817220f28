// The TCP transport: meshes as threads and as processes, data integrity through SendRecv, and the
// failure paths (peer exit, silent peer, missing rank, refused handshake, Abort) with the errors
// they must produce. Everything runs on 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/multiproc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvd::runtime::transport {
namespace {

using rendezvous::Store;
using std::chrono::milliseconds;
using tcp::TcpOptions;
using TransportPtr = std::unique_ptr<Transport>;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TcpOptions Options(const std::string& scope, milliseconds connect_timeout = milliseconds(20000)) {
  TcpOptions o;
  o.scope = scope;
  o.connect_timeout = connect_timeout;
  return o;
}

// Connects ranks `ranks` of `size` as threads; statuses[r] and transports[r] per rank.
void ConnectThreads(Store& store, int size, const std::vector<int>& ranks, const TcpOptions& o,
                    std::vector<Status>* statuses, std::vector<TransportPtr>* transports) {
  statuses->assign(size, Status::OK());
  transports->clear();
  transports->resize(size);
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back(
        [&, r] { (*statuses)[r] = tcp::Connect(store, r, size, o, &(*transports)[r]); });
  }
  for (auto& t : threads) t.join();
}

uint8_t Pattern(int src, int dst, size_t i) {
  return static_cast<uint8_t>(src * 31 + dst * 7 + i * 13 + (i >> 9));
}

// Exchanges payloads of 0, 1 and 1 MiB + 3 bytes with every peer and checks every byte. Peers are
// visited in increasing rank order, which orders all pairs consistently: no deadlock.
Status ExchangeWithAll(Transport& t) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{(1 << 20) + 3}}) {
    for (int p = 0; p < t.size(); ++p) {
      if (p == t.rank()) continue;
      std::vector<uint8_t> out(n), in(n, 0xEE);
      for (size_t i = 0; i < n; ++i) out[i] = Pattern(t.rank(), p, i);
      HVD_RETURN_IF_ERROR(SendRecv(t, p, out.data(), n, p, in.data(), n, milliseconds(20000)));
      for (size_t i = 0; i < n; ++i) {
        if (in[i] != Pattern(p, t.rank(), i)) {
          return Internal("byte " + std::to_string(i) + " of " + std::to_string(n) + " from rank " +
                          std::to_string(p) + " is wrong");
        }
      }
    }
  }
  return Status::OK();
}

class MeshTest : public ::testing::TestWithParam<int> {};

TEST_P(MeshTest, ThreadsExchangeAndVerify) {
  const int size = GetParam();
  auto store = rendezvous::NewMemoryStore();
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(r);
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, size, ranks, Options("mesh" + std::to_string(size)), &st, &t);
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
    EXPECT_EQ(t[r]->rank(), r);
    EXPECT_EQ(t[r]->size(), size);
    for (int p = 0; p < size; ++p) {
      if (p == r) continue;
      ASSERT_NE(t[r]->link(p), nullptr);
      EXPECT_EQ(t[r]->link(p)->peer(), p);
      EXPECT_EQ(t[r]->link(p)->description().rfind("rank " + std::to_string(p) + " (127.0.0.1:", 0),
                0u)
          << t[r]->link(p)->description();
    }
  }
  std::vector<Status> results(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] { results[r] = ExchangeWithAll(*t[r]); });
  for (auto& th : threads) th.join();
  for (int r = 0; r < size; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
}

INSTANTIATE_TEST_SUITE_P(Sizes, MeshTest, ::testing::Values(2, 3, 5));

TEST(TcpTransportTest, SmallSocketBuffersStillDeliver) {
  auto store = rendezvous::NewMemoryStore();
  TcpOptions o = Options("smallbuf");
  o.socket_buffer_bytes = 4096;  // many partial sends and receives per transfer
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, 2, {0, 1}, o, &st, &t);
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  Status r1;
  std::thread peer([&] { r1 = ExchangeWithAll(*t[1]); });
  Status r0 = ExchangeWithAll(*t[0]);
  peer.join();
  EXPECT_TRUE(r0.ok()) << r0.ToString();
  EXPECT_TRUE(r1.ok()) << r1.ToString();
}

TEST(TcpTransportTest, SingleRankNeedsNoPeers) {
  auto store = rendezvous::NewMemoryStore();
  TransportPtr t;
  ASSERT_TRUE(tcp::Connect(*store, 0, 1, Options("solo"), &t).ok());
  EXPECT_EQ(t->size(), 1);
  EXPECT_EQ(tcp::Connect(*store, 2, 2, Options("solo"), &t).code(), StatusCode::kInvalidArgument);
}

TEST(TcpTransportTest, ProcessesMeshOverFileStore) {
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;
        HVD_RETURN_IF_ERROR(tcp::Connect(*store, rank, size, Options("procs"), &t));
        return ExchangeWithAll(*t);
      });
  HVD_EXPECT_RANKS_OK(res);
}

// Rank 1 exits right after connecting (no orderly shutdown: the kernel closes its sockets).
Status ExpectPeerExitNoticed(Transport& t) {
  auto start = Clock::now();
  char buf[16];
  Status s = Recv(t, 1, buf, sizeof(buf), milliseconds(10000));
  auto elapsed = Clock::now() - start;
  if (s.code() != StatusCode::kUnavailable || !Contains(s.message(), "rank 1 (127.0.0.1:") ||
      !Contains(s.message(), "closed the connection") || elapsed > milliseconds(5000)) {
    return Internal("Recv from the exited peer gave " + s.ToString() + " after " +
                    std::to_string(elapsed / milliseconds(1)) + " ms");
  }
  // Sending to the dead peer fails with an error, never SIGPIPE (which would kill this rank).
  std::vector<char> big(8 << 20);
  s = Send(t, 1, big.data(), big.size(), milliseconds(10000));
  if (s.code() != StatusCode::kUnavailable || !Contains(s.message(), "send to rank 1")) {
    return Internal("Send to the exited peer gave " + s.ToString());
  }
  return Status::OK();
}

TEST(TcpTransportTest, PeerExitIsUnavailableNamingThePeer) {
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;
        HVD_RETURN_IF_ERROR(tcp::Connect(*store, rank, size, Options("exit"), &t));
        if (rank == 1) _exit(0);
        return ExpectPeerExitNoticed(*t);
      });
  ASSERT_EQ(res.ranks.size(), 2u);
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
  EXPECT_TRUE(res.ranks[1].exited && res.ranks[1].exit_code == 0) << res.ranks[1].Describe();
}

TEST(TcpTransportTest, SilentPeerHitsIdleTimeout) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, 2, {0, 1}, Options("silent"), &st, &t);
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  const char part[4] = {1, 2, 3, 4};
  ASSERT_TRUE(Send(*t[1], 0, part, sizeof(part), milliseconds(1000)).ok());
  auto start = Clock::now();
  char buf[16];
  Status s = Recv(*t[0], 1, buf, sizeof(buf), milliseconds(300));
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "recv from rank 1 (127.0.0.1:")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "12 of 16 bytes outstanding")) << s.message();
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, milliseconds(2000));
}

TEST(TcpTransportTest, MissingRankIsNamedInDeadline) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  auto start = Clock::now();
  ConnectThreads(*store, 3, {0, 1}, Options("missing", milliseconds(500)), &st, &t);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  for (int r : {0, 1}) {
    EXPECT_EQ(st[r].code(), StatusCode::kDeadlineExceeded) << st[r].ToString();
    EXPECT_TRUE(Contains(st[r].message(), "never published an address")) << st[r].message();
    EXPECT_TRUE(Contains(st[r].message(), ": rank 2")) << st[r].message();
    EXPECT_FALSE(Contains(st[r].message(), "rank " + std::to_string(1 - r) + " ("))
        << st[r].message();
  }
}

// A port nothing listens on: bind an ephemeral one and close it.
int ClosedPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  close(fd);
  return ntohs(a.sin_port);
}

TEST(TcpTransportTest, DeadPublishedAddressRetriesThenNamesRank) {
  auto store = rendezvous::NewMemoryStore();
  int port = ClosedPort();
  ASSERT_GT(port, 0);
  std::string address = "127.0.0.1:" + std::to_string(port);
  ASSERT_TRUE(store->Set("dead/tcp/0", address).ok());
  TransportPtr t;
  Status s = tcp::Connect(*store, 1, 2, Options("dead", milliseconds(400)), &t);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "never connected: rank 0 (" + address + ")")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "ECONNREFUSED")) << s.message();
}

TEST(TcpTransportTest, MismatchedHandshakeIsRefused) {
  auto store = rendezvous::NewMemoryStore();
  Status s0, s1;
  TransportPtr t0, t1;
  std::thread r0([&] { s0 = tcp::Connect(*store, 0, 2, Options("mm", milliseconds(700)), &t0); });
  std::thread r1([&] { s1 = tcp::Connect(*store, 1, 3, Options("mm", milliseconds(700)), &t1); });
  r0.join();
  r1.join();
  EXPECT_EQ(s1.code(), StatusCode::kFailedPrecondition) << s1.ToString();
  EXPECT_TRUE(Contains(s1.message(), "handshake with rank 0 (127.0.0.1:")) << s1.message();
  EXPECT_TRUE(Contains(s1.message(), "communicator size 2, this rank has size 3")) << s1.message();
  EXPECT_EQ(s0.code(), StatusCode::kDeadlineExceeded) << s0.ToString();
  EXPECT_TRUE(Contains(s0.message(), "refused 1 connection")) << s0.message();
  EXPECT_TRUE(Contains(s0.message(), "rank 1 (127.0.0.1:")) << s0.message();
}

// A raw client speaking garbage is refused, and the real mesh still forms.
TEST(TcpTransportTest, StrayConnectionIsRefusedAndMeshStillForms) {
  auto store = rendezvous::NewMemoryStore();
  Status s0;
  TransportPtr t0;
  std::thread r0([&] { s0 = tcp::Connect(*store, 0, 2, Options("stray"), &t0); });
  std::string address;
  Status s = store->Wait({"stray/tcp/0"}, milliseconds(10000));
  if (s.ok()) s = store->Get("stray/tcp/0", &address);
  std::string reply;
  if (s.ok()) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      std::string junk(32, 'x');
      (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
      char buf[64];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, static_cast<size_t>(n));
    }
    close(fd);
  }
  TransportPtr t1;
  Status s1 = tcp::Connect(*store, 1, 2, Options("stray"), &t1);
  r0.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  // The reply is a hello with a nonzero refusal code, then the acceptor closes the connection.
  ASSERT_EQ(reply.size(), 32u);
  EXPECT_NE(reply[28], 0);
  ASSERT_TRUE(s0.ok()) << s0.ToString();
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  const char c = 'z';
  char got = 0;
  ASSERT_TRUE(Send(*t1, 0, &c, 1, milliseconds(5000)).ok());
  ASSERT_TRUE(Recv(*t0, 1, &got, 1, milliseconds(5000)).ok());
  EXPECT_EQ(got, 'z');
}

TEST(TcpTransportTest, AbortUnblocksRecvPromptly) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, 2, {0, 1}, Options("abort"), &st, &t);
  ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  Status blocked, peer;
  Clock::time_point returned;
  std::thread waiter([&] {
    char buf[8];
    blocked = Recv(*t[0], 1, buf, sizeof(buf), milliseconds(30000));
    returned = Clock::now();
  });
  std::thread peer_waiter([&] {
    char buf[8];
    peer = Recv(*t[1], 0, buf, sizeof(buf), milliseconds(30000));
  });
  std::this_thread::sleep_for(milliseconds(100));
  auto aborted_at = Clock::now();
  t[0]->Abort("test says stop");
  waiter.join();
  peer_waiter.join();
  EXPECT_EQ(blocked.code(), StatusCode::kAborted) << blocked.ToString();
  EXPECT_EQ(blocked.message(), "test says stop");
  EXPECT_LT(returned - aborted_at, milliseconds(1000));
  // The peer learns at once too: Abort shuts the sockets down.
  EXPECT_EQ(peer.code(), StatusCode::kUnavailable) << peer.ToString();
  EXPECT_TRUE(Contains(peer.message(), "rank 0 (127.0.0.1:")) << peer.message();
  // Every later operation fails with the same reason.
  size_t moved = 0;
  EXPECT_EQ(t[0]->link(1)->TrySend("x", 1, &moved).code(), StatusCode::kAborted);
  EXPECT_EQ(
      t[0]->WaitReady({{t[0]->link(1), false, true}}, Clock::now() + milliseconds(1000)).code(),
      StatusCode::kAborted);
  t[0]->Abort("second reason is ignored");
  EXPECT_EQ(t[0]->link(1)->TryRecv(&moved, 1, &moved).message(), "test says stop");
}

TEST(TcpTransportTest, WaitReadyDeadlineNamesPeers) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, 3, {0, 1, 2}, Options("wait"), &st, &t);
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  Status s = t[0]->WaitReady({{t[0]->link(1), false, true}, {t[0]->link(2), false, true}},
                             Clock::now() + milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "rank 1 (") && Contains(s.message(), "rank 2 ("))
      << s.message();
  // A writable link is ready at once.
  EXPECT_TRUE(
      t[0]->WaitReady({{t[0]->link(2), true, false}}, Clock::now() + milliseconds(1000)).ok());
}

}  // namespace
}  // namespace hvd::runtime::transport
