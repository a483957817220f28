// What every transport must do, checked on each backend (TCP and shared memory): meshes as
// threads, data integrity through SendRecv, and the failure paths (a peer that exits or is
// killed, a silent peer, a missing rank, Abort) with the errors they must produce, naming the
// peer. Backend-specific cases are in tcp_transport_test.cc and shm_transport_test.cc.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/exchange.h"
#include "testutil/multiproc.h"
#include "testutil/proc_counts.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace hvd::runtime::transport {
namespace {

using hvd::testing::Contains;
using hvd::testing::ExchangeWithAll;
using rendezvous::Store;
using std::chrono::milliseconds;
using TransportPtr = std::unique_ptr<Transport>;

struct Backend {
  std::string name;
  std::function<Status(Store&, int rank, int size, const std::string& scope, milliseconds timeout,
                       TransportPtr*)>
      connect;
  std::string link;     // how a link's description starts after "rank N "
  std::string missing;  // how the setup timeout names a rank that never published
};

std::vector<Backend> Backends() {
  return {
      {"tcp",
       [](Store& store, int rank, int size, const std::string& scope, milliseconds timeout,
          TransportPtr* out) {
         tcp::TcpOptions o;
         o.scope = scope;
         o.connect_timeout = timeout;
         return tcp::Connect(store, rank, size, o, out);
       },
       "(127.0.0.1:", "never published an address"},
      {"shm",
       [](Store& store, int rank, int size, const std::string& scope, milliseconds timeout,
          TransportPtr* out) {
         shm::ShmOptions o;
         o.scope = scope;
         o.connect_timeout = timeout;
         o.ring_bytes = 4096;  // many wraps and partial transfers per exchange
         return shm::Connect(store, rank, size, o, out);
       },
       "(shm segment '", "never published a shm socket"},
  };
}

class TransportContract : public ::testing::TestWithParam<Backend> {
 protected:
  // Connects ranks `ranks` of `size` as threads; statuses[r] and transports[r] per rank.
  void ConnectThreads(Store& store, int size, const std::vector<int>& ranks,
                      const std::string& scope, milliseconds timeout, std::vector<Status>* statuses,
                      std::vector<TransportPtr>* transports) {
    statuses->assign(size, Status::OK());
    transports->clear();
    transports->resize(size);
    std::vector<std::thread> threads;
    for (int r : ranks) {
      threads.emplace_back([&, r] {
        (*statuses)[r] = GetParam().connect(store, r, size, scope, timeout, &(*transports)[r]);
      });
    }
    for (auto& t : threads) t.join();
  }

  // Ranks 0..size-1 as threads.
  void ConnectAll(Store& store, int size, const std::string& scope, std::vector<Status>* statuses,
                  std::vector<TransportPtr>* transports) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    ConnectThreads(store, size, ranks, scope, milliseconds(20000), statuses, transports);
  }

  // Two connected ranks as threads.
  void ConnectPair(Store& store, const std::string& scope, std::vector<TransportPtr>* t) {
    std::vector<Status> st;
    ConnectThreads(store, 2, {0, 1}, scope, milliseconds(20000), &st, t);
    ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  }

  std::string Link(int rank) const {
    return "rank " + std::to_string(rank) + " " + GetParam().link;
  }
};

size_t OpenFds() {
  return hvd::testing::CountEntries("/proc/self/fd");
}

TEST_P(TransportContract, ThreadMeshesExchangeVerifyAndCloseEverything) {
  const size_t fds_before = OpenFds();
  for (int size : {2, 3, 5}) {
    auto store = rendezvous::NewMemoryStore();
    std::vector<Status> st;
    std::vector<TransportPtr> t;
    ConnectAll(*store, size, "mesh" + std::to_string(size), &st, &t);
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
      EXPECT_EQ(t[r]->rank(), r);
      EXPECT_EQ(t[r]->size(), size);
      for (int p = 0; p < size; ++p) {
        if (p == r) continue;
        EXPECT_EQ(t[r]->link(p)->peer(), p);
        EXPECT_EQ(t[r]->link(p)->description().rfind(Link(p), 0), 0u)
            << t[r]->link(p)->description();
      }
    }
    std::vector<Status> results(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] { results[r] = ExchangeWithAll(*t[r]); });
    }
    for (auto& th : threads) th.join();
    for (int r = 0; r < size; ++r) {
      EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
    }
  }
  // Sockets, segments and eventfds are all closed with the transports.
  EXPECT_EQ(OpenFds(), fds_before);
}

// Rank 1 dies right after connecting (no orderly shutdown: the kernel closes what it held), by
// exiting (signal 0) or by `signal`. Rank 0 must learn it from a receive and from a send larger
// than any buffer, quickly, with an error naming rank 1 (and never die of SIGPIPE).
void ExpectDeathNoticed(const Backend& backend, int signal) {
  hvd::testing::RunOptions options;
  options.failure_grace = milliseconds(20000);
  hvd::testing::RunResult res = hvd::testing::RunRanks(
      2,
      [&backend, signal](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> store;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &store));
        TransportPtr t;
        HVD_RETURN_IF_ERROR(backend.connect(*store, rank, size, "exit", milliseconds(20000), &t));
        if (rank == 1) {
          if (signal == 0) _exit(0);
          raise(signal);
        }
        auto start = Clock::now();
        char buf[16];
        Status s = Recv(*t, 1, buf, sizeof(buf), milliseconds(10000));
        auto elapsed = Clock::now() - start;
        if (s.code() != StatusCode::kUnavailable ||
            !Contains(s.message(), "rank 1 " + backend.link) ||
            !Contains(s.message(), "closed the connection") || elapsed > milliseconds(3000)) {
          return Internal("Recv from the dead peer gave " + s.ToString() + " after " +
                          std::to_string(elapsed / milliseconds(1)) + " ms");
        }
        std::vector<char> big(8 << 20);
        s = Send(*t, 1, big.data(), big.size(), milliseconds(10000));
        if (s.code() != StatusCode::kUnavailable || !Contains(s.message(), "rank 1 (")) {
          return Internal("Send to the dead peer gave " + s.ToString());
        }
        return Status::OK();
      },
      options);
  ASSERT_EQ(res.ranks.size(), 2u);
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
}

TEST_P(TransportContract, PeerExitIsUnavailableNamingThePeer) {
  ExpectDeathNoticed(GetParam(), 0);
}

TEST_P(TransportContract, KilledPeerIsUnavailableNamingThePeer) {
  ExpectDeathNoticed(GetParam(), SIGKILL);
}

TEST_P(TransportContract, SilentPeerHitsIdleTimeout) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<TransportPtr> t;
  ConnectPair(*store, "silent", &t);
  const char part[4] = {1, 2, 3, 4};
  ASSERT_TRUE(Send(*t[1], 0, part, sizeof(part), milliseconds(1000)).ok());
  auto start = Clock::now();
  char buf[16];
  Status s = Recv(*t[0], 1, buf, sizeof(buf), milliseconds(300));
  auto elapsed = Clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "recv from " + Link(1))) << s.message();
  EXPECT_TRUE(Contains(s.message(), "12 of 16 bytes outstanding")) << s.message();
  EXPECT_GE(elapsed, milliseconds(300));
  EXPECT_LT(elapsed, milliseconds(2000));
}

TEST_P(TransportContract, MissingRankIsNamedInDeadline) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  auto start = Clock::now();
  ConnectThreads(*store, 3, {0, 1}, "missing", milliseconds(500), &st, &t);
  EXPECT_LT(Clock::now() - start, milliseconds(5000));
  for (int r : {0, 1}) {
    EXPECT_EQ(st[r].code(), StatusCode::kDeadlineExceeded) << st[r].ToString();
    EXPECT_TRUE(Contains(st[r].message(), GetParam().missing)) << st[r].message();
    EXPECT_TRUE(Contains(st[r].message(), ": rank 2")) << st[r].message();
  }
}

TEST_P(TransportContract, AbortUnblocksRecvPromptlyOnBothSides) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<TransportPtr> t;
  ConnectPair(*store, "abort", &t);
  Status blocked, peer;
  Clock::time_point returned, peer_returned;
  std::thread waiter([&] {
    char buf[8];
    blocked = Recv(*t[0], 1, buf, sizeof(buf), milliseconds(30000));
    returned = Clock::now();
  });
  std::thread peer_waiter([&] {
    char buf[8];
    peer = Recv(*t[1], 0, buf, sizeof(buf), milliseconds(30000));
    peer_returned = Clock::now();
  });
  std::this_thread::sleep_for(milliseconds(100));  // both are asleep by now
  auto aborted_at = Clock::now();
  t[0]->Abort("test says stop");
  waiter.join();
  peer_waiter.join();
  EXPECT_EQ(blocked.code(), StatusCode::kAborted) << blocked.ToString();
  EXPECT_EQ(blocked.message(), "test says stop");
  EXPECT_LT(returned - aborted_at, milliseconds(1000));
  // The peer learns at once too.
  EXPECT_EQ(peer.code(), StatusCode::kUnavailable) << peer.ToString();
  EXPECT_TRUE(Contains(peer.message(), Link(0))) << peer.message();
  EXPECT_LT(peer_returned - aborted_at, milliseconds(1000));
  // Every later operation fails with the same reason.
  size_t moved = 0;
  EXPECT_EQ(t[0]->link(1)->TrySend("x", 1, &moved).code(), StatusCode::kAborted);
  EXPECT_EQ(
      t[0]->WaitReady({{t[0]->link(1), false, true}}, Clock::now() + milliseconds(1000)).code(),
      StatusCode::kAborted);
  t[0]->Abort("second reason is ignored");
  EXPECT_EQ(t[0]->link(1)->TryRecv(&moved, 1, &moved).message(), "test says stop");
}

TEST_P(TransportContract, WaitReadyDeadlineNamesPeers) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<Status> st;
  std::vector<TransportPtr> t;
  ConnectThreads(*store, 3, {0, 1, 2}, "wait", milliseconds(20000), &st, &t);
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  Status s = t[0]->WaitReady({{t[0]->link(1), false, true}, {t[0]->link(2), false, true}},
                             Clock::now() + milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), Link(1)) && Contains(s.message(), Link(2))) << s.message();
  // A writable link is ready at once.
  EXPECT_TRUE(
      t[0]->WaitReady({{t[0]->link(2), true, false}}, Clock::now() + milliseconds(1000)).ok());
}

// A message whose first 8 bytes give the length of the rest (Transfer::then), sent by every rank
// to every other in one ExchangeWithAll: rank r sends r x 5000 bytes (rank 0 none; more than the
// shm ring of 4096, so sends and receives must progress together), and every byte arrives.
struct Framed {
  std::vector<uint8_t> out;              // this rank's payload
  std::vector<std::vector<uint8_t>> in;  // by peer
  bool fail = false;                     // the receive continuation fails
};

Status SendRest(void* context, const Transfer&, void** more, size_t* bytes) {
  auto* f = static_cast<Framed*>(context);
  *more = f->out.data();
  *bytes = f->out.size();
  return Status::OK();
}

Status RecvRest(void* context, const Transfer& done, void** more, size_t* bytes) {
  auto* f = static_cast<Framed*>(context);
  if (f->fail) return InvalidArgument("rank " + std::to_string(done.peer) + "'s header is bad");
  uint64_t n;
  std::memcpy(&n, done.data, sizeof n);
  f->in[done.peer].assign(n, 0xEE);
  *more = f->in[done.peer].data();
  *bytes = n;
  return Status::OK();
}

TEST_P(TransportContract, ContinuationsCarryWhatTheHeaderAnnounces) {
  for (int size : {2, 3}) {
    auto store = rendezvous::NewMemoryStore();
    std::vector<Status> st;
    std::vector<TransportPtr> t;
    ConnectAll(*store, size, "framed" + std::to_string(size), &st, &t);
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
    std::vector<Framed> f(size);
    std::vector<Status> results(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      f[r].out.resize(static_cast<size_t>(r) * 5000);
      for (size_t i = 0; i < f[r].out.size(); ++i) f[r].out[i] = hvd::testing::Pattern(r, 0, i);
      f[r].in.resize(size);
      threads.emplace_back([&, r] {
        uint64_t header = f[r].out.size();
        std::vector<uint64_t> headers(size);
        results[r] = transport::ExchangeWithAll(*t[r], &header, sizeof header, headers.data(),
                                                milliseconds(20000), SendRest, RecvRest, &f[r]);
      });
    }
    for (auto& th : threads) th.join();
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].ToString();
      for (int p = 0; p < size; ++p) {
        if (p != r) {
          EXPECT_EQ(f[r].in[p], f[p].out) << "rank " << r << " from " << p;
        }
      }
    }
  }
}

TEST_P(TransportContract, AFailingContinuationFailsTheExchange) {
  auto store = rendezvous::NewMemoryStore();
  std::vector<TransportPtr> t;
  ConnectPair(*store, "framed-fail", &t);
  std::vector<Framed> f(2);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    f[r].in.resize(2);
    f[r].fail = r == 0;
    threads.emplace_back([&, r] {
      uint64_t header = 0, headers[2];
      results[r] = transport::ExchangeWithAll(*t[r], &header, sizeof header, headers,
                                              milliseconds(20000), SendRest, RecvRest, &f[r]);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(results[0].code(), StatusCode::kInvalidArgument) << results[0].ToString();
  EXPECT_EQ(results[0].message(), "rank 1's header is bad");
  EXPECT_TRUE(results[1].ok()) << results[1].ToString();
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportContract, ::testing::ValuesIn(Backends()),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace hvd::runtime::transport
