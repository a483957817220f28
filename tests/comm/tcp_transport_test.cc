// The TCP transport's own cases: small socket buffers, a mesh of processes, and its setup failures
// (a dead published address, a refused handshake, a stray connection). What every transport must
// do is in transport_contract_test.cc. Everything runs on 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/exchange.h"
#include "testutil/multiproc.h"
#include "transport/tcp/tcp_transport.h"
#include "transport/transport.h"

namespace hvd::runtime::transport {
namespace {

using rendezvous::Store;
using std::chrono::milliseconds;
using tcp::TcpOptions;
using TransportPtr = std::unique_ptr<Transport>;
using hvd::testing::Contains;
using hvd::testing::ExchangeWithAll;

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

}  // namespace
}  // namespace hvd::runtime::transport
