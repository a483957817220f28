// KvServer: the launcher's rendezvous endpoint on 127.0.0.1, driven by the real runtime client
// (OpenStore("hvd://...")), by raw protocol frames, and by whole runtime jobs.
#include "launcherd/kv_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <thread>

#include "base/kv_protocol.h"
#include "hvd/hvd.h"
#include "rendezvous/store.h"
#include "tests/launcherd/kv_test_util.h"
#include "testutil/multiproc.h"

namespace hvd::launcherd {
namespace {

namespace kv = base::kv;
using runtime::rendezvous::OpenStore;
using runtime::rendezvous::Store;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

const std::map<std::string, std::string> kSecrets = {
    {"secret-1", "job/j1/"}, {"secret-2", "job/j2/"}, {"secret-e2e", "job/e2e/"}};

bool Resolve(const std::string& secret, std::string* prefix) {
  auto it = kSecrets.find(secret);
  if (it == kSecrets.end()) return false;
  *prefix = it->second;
  return true;
}

using kvtest::Contains;
using kvtest::Hello;
using kvtest::PortOf;
using kvtest::RawConn;

class KvServerTest : public kvtest::EndpointTest {
 protected:
  KvServerTest() : EndpointTest("secret-1", Resolve) {}
};

TEST_F(KvServerTest, RuntimeClientOpsWork) {
  std::unique_ptr<Store> base;
  ASSERT_TRUE(OpenStore(url_, &base).ok());
  EXPECT_EQ(base->Describe(), "launcher rendezvous at " + server_->address());
  auto store = runtime::rendezvous::NewPrefixStore("job/j1/attempt/0", base.get());
  ASSERT_TRUE(store->Set("host/0", "3\nnode-a").ok());
  std::string v;
  ASSERT_TRUE(store->Get("host/0", &v).ok());
  EXPECT_EQ(v, "3\nnode-a");
  ASSERT_TRUE(store_.Get("job/j1/attempt/0/host/0", &v).ok());  // the launcher sees the full key
  Status s = store->Get("host/9", &v);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s, server_->address()) && Contains(s, "GET")) << s.message();
  int64_t n = 0;
  ASSERT_TRUE(store->Add("count", 2, &n).ok());
  ASSERT_TRUE(store->Add("count", 3, &n).ok());
  EXPECT_EQ(n, 5);
  EXPECT_TRUE(store->Wait({"host/0", "count"}, milliseconds(1000)).ok());
  s = store->Wait({"host/0", "host/1"}, milliseconds(50));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(s, "'job/j1/attempt/0/host/1'") && Contains(s, server_->address()))
      << s.message();
  std::string big(1 << 20, 'x');  // values are bytes, up to the frame limit
  big[7] = '\0';
  ASSERT_TRUE(store->Set("blob", big).ok());
  ASSERT_TRUE(store->Get("blob", &v).ok());
  EXPECT_EQ(v, big);
}

TEST_F(KvServerTest, WaitWakesWhenAnotherClientSets) {
  std::unique_ptr<Store> a, b;
  ASSERT_TRUE(OpenStore(url_, &a).ok());
  ASSERT_TRUE(OpenStore(url_, &b).ok());
  Status waited;
  std::thread waiter([&] { waited = a->Wait({"job/j1/x"}, milliseconds(20000)); });
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(b->Set("job/j1/x", "1").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited.ToString();
}

TEST_F(KvServerTest, CompareAndSetOverTheWire) {
  RawConn c(server_->address());
  kv::Response resp;
  ASSERT_TRUE(c.Call(Hello("secret-1"), &resp).ok());
  ASSERT_TRUE(resp.status.ok()) << resp.status.ToString();
  EXPECT_EQ(resp.value, "job/j1/");
  kv::Request cas;
  cas.op = kv::Op::kCas;
  cas.key = "job/j1/leader";
  cas.expect_absent = true;
  cas.desired = "rank3";
  ASSERT_TRUE(c.Call(cas, &resp).ok());
  EXPECT_TRUE(resp.status.ok() && resp.swapped && resp.found && resp.current == "rank3");
  cas.desired = "rank4";
  ASSERT_TRUE(c.Call(cas, &resp).ok());
  EXPECT_TRUE(resp.status.ok() && !resp.swapped && resp.found && resp.current == "rank3");
  cas.expect_absent = false;
  cas.expected = "rank3";
  ASSERT_TRUE(c.Call(cas, &resp).ok());
  EXPECT_TRUE(resp.swapped && resp.current == "rank4");
}

TEST_F(KvServerTest, WrongOrMissingSecretIsRefused) {
  std::unique_ptr<Store> s;
  setenv("HVD_JOB_SECRET", "not-a-secret", 1);
  Status st = OpenStore(url_, &s);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st, "permission denied") && Contains(st, "HVD_JOB_SECRET") &&
              Contains(st, server_->address()) && Contains(st, "HELLO"))
      << st.message();
  unsetenv("HVD_JOB_SECRET");
  st = OpenStore(url_, &s);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st, "HVD_JOB_SECRET is not set")) << st.message();

  RawConn raw(server_->address());  // a request before HELLO
  kv::Request get;
  get.op = kv::Op::kGet;
  get.key = "job/j1/a";
  kv::Response resp;
  ASSERT_TRUE(raw.Call(get, &resp).ok());
  EXPECT_EQ(resp.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(resp.status, "first request") && Contains(resp.status, "HELLO"))
      << resp.status.message();
  EXPECT_TRUE(raw.Closed());

  RawConn empty(server_->address());
  ASSERT_TRUE(empty.Call(Hello(""), &resp).ok());
  EXPECT_TRUE(Contains(resp.status, "no job secret")) << resp.status.message();
  EXPECT_TRUE(empty.Closed());
}

TEST_F(KvServerTest, KeyOutsideTheJobPrefixIsRefused) {
  std::unique_ptr<Store> base;
  ASSERT_TRUE(OpenStore(url_, &base).ok());
  // What a rank with the right secret but another job's HVD_JOB_ID would do.
  auto other = runtime::rendezvous::NewPrefixStore("job/j2/attempt/0", base.get());
  Status s = other->Set("host/0", "x");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(s, "'job/j2/attempt/0/host/0'") && Contains(s, "'job/j1/...'") &&
              Contains(s, "SET"))
      << s.message();
  s = other->Wait({"host/0"}, milliseconds(10));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  std::string v;
  EXPECT_EQ(store_.Get("job/j2/attempt/0/host/0", &v).code(), StatusCode::kNotFound);
  EXPECT_TRUE(base->Set("job/j1/ok", "still usable").ok());  // a refusal keeps the connection
}

TEST_F(KvServerTest, StopFailsABlockedWaitPromptly) {
  std::unique_ptr<Store> s;
  ASSERT_TRUE(OpenStore(url_, &s).ok());
  Status waited;
  Clock::time_point ended;
  std::thread waiter([&] {
    waited = s->Wait({"job/j1/never"}, milliseconds(60000));
    ended = Clock::now();
  });
  std::this_thread::sleep_for(milliseconds(100));
  const auto stop_at = Clock::now();
  server_->Stop();
  waiter.join();
  EXPECT_LT(ended - stop_at, milliseconds(3000));
  EXPECT_EQ(waited.code(), StatusCode::kUnavailable) << waited.ToString();
  EXPECT_TRUE(Contains(waited, server_->address()) && Contains(waited, "WAIT")) << waited.message();
  Status later = s->Set("job/j1/a", "b");  // the connection is gone
  EXPECT_EQ(later.code(), StatusCode::kUnavailable) << later.ToString();
  EXPECT_TRUE(Contains(later, server_->address())) << later.message();
  server_->Stop();  // idempotent
}

TEST_F(KvServerTest, OversizedAndMalformedFramesAreRefused) {
  kv::Response resp;
  RawConn big(server_->address());
  ASSERT_TRUE(big.SendBytes(std::string("\x00\x00\x00\x10", 4)).ok());  // a 256 MiB frame
  ASSERT_TRUE(big.Read(kv::Op::kHello, &resp).ok());
  EXPECT_EQ(resp.status.code(), StatusCode::kInvalidArgument);
  // Before HELLO only a HELLO-sized frame is read (kv::kMaxHelloFrameBytes).
  EXPECT_TRUE(Contains(resp.status, "268435456 bytes") && Contains(resp.status, "4096 bytes"))
      << resp.status.message();
  EXPECT_TRUE(big.Closed());

  RawConn unknown(server_->address());
  ASSERT_TRUE(unknown.Send(std::string("\x63", 1)).ok());
  ASSERT_TRUE(unknown.Read(kv::Op::kHello, &resp).ok());
  EXPECT_EQ(resp.status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(resp.status, "unknown op 99")) << resp.status.message();
  EXPECT_TRUE(unknown.Closed());

  RawConn truncated(server_->address());
  ASSERT_TRUE(truncated.Send(std::string("\x01\x01\x00", 3)).ok());  // HELLO, short version
  ASSERT_TRUE(truncated.Read(kv::Op::kHello, &resp).ok());
  EXPECT_TRUE(Contains(resp.status, "malformed rendezvous HELLO request")) << resp.status.message();
}

TEST_F(KvServerTest, ManyClientsCountTogether) {
  constexpr int kClients = 16, kAdds = 50;
  std::vector<std::thread> ts;
  std::vector<Status> results(kClients);
  for (int c = 0; c < kClients; ++c) {
    ts.emplace_back([&, c] {
      std::unique_ptr<Store> s;
      results[c] = OpenStore(url_, &s);
      for (int i = 0; i < kAdds && results[c].ok(); ++i) {
        results[c] = s->Add("job/j1/n", 1, nullptr);
      }
    });
  }
  for (auto& t : ts) t.join();
  for (const Status& s : results) EXPECT_TRUE(s.ok()) << s.ToString();
  std::string v;
  ASSERT_TRUE(store_.Get("job/j1/n", &v).ok());
  EXPECT_EQ(v, std::to_string(kClients * kAdds));
}

// A free port on 127.0.0.1 (bound, then released).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(KvServerConnect, RetriesWhileTheLauncherStartsAndGivesUpAtTheDeadline) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  setenv("HVD_JOB_SECRET", "secret-1", 1);
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "0.3", 1);
  std::unique_ptr<Store> s;
  auto t0 = Clock::now();
  Status st = OpenStore("hvd://" + address, &s);
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Contains(st, "launcher rendezvous at " + address) &&
              Contains(st, "could not connect within 300 ms") && Contains(st, "ECONNREFUSED"))
      << st.message();

  // The launcher comes up while the rank is already dialing.
  setenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS", "20", 1);
  KvStore store;
  std::unique_ptr<KvServer> server;
  Status started;
  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(300));
    started = KvServer::Start(address, &store, Resolve, &server);
  });
  st = OpenStore("hvd://" + address + "/", &s);
  late.join();
  ASSERT_TRUE(started.ok()) << started.ToString();
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (st.ok()) {
    EXPECT_TRUE(s->Set("job/j1/k", "v").ok());
  }
  server->Stop();
  unsetenv("HVD_JOB_SECRET");
  unsetenv("HVD_RENDEZVOUS_TIMEOUT_SECONDS");

  EXPECT_EQ(OpenStore("hvd://127.0.0.1", &s).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStore("hvd://127.0.0.1:99999", &s).code(), StatusCode::kInvalidArgument);
}

// Runs a launcher's rendezvous endpoint in a child process, so that the test process stays
// single-threaded for RunRanks' fork. The child serves until the parent closes `control`, then
// reports which of `expect` keys its store holds and exits.
class ServerProcess {
 public:
  ServerProcess() {
    int addr_pipe[2], control[2];
    if (pipe2(addr_pipe, O_CLOEXEC) != 0 || pipe2(control, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      close(addr_pipe[0]);
      close(control[1]);
      KvStore store;
      std::unique_ptr<KvServer> server;
      Status s = KvServer::Start("127.0.0.1:0", &store, Resolve, &server);
      std::string line = s.ok() ? server->address() : "ERROR " + s.message();
      line += "\n";
      (void)!write(addr_pipe[1], line.data(), line.size());
      char expect[4096];
      ssize_t n = read(control[0], expect, sizeof(expect));  // the parent's key list, then EOF
      std::string missing, keys(expect, n > 0 ? n : 0);
      for (size_t pos = 0; pos < keys.size();) {
        size_t nl = keys.find('\n', pos);
        std::string k = keys.substr(pos, nl - pos), v;
        if (!store.Get(k, &v).ok()) missing += k + " ";
        pos = nl + 1;
      }
      missing = "missing: " + missing + "\n";
      (void)!write(addr_pipe[1], missing.data(), missing.size());
      if (server) server->Stop();
      _exit(0);
    }
    close(addr_pipe[1]);
    close(control[0]);
    from_child_ = addr_pipe[0];
    to_child_ = control[1];
    address_ = ReadLine();
  }
  ~ServerProcess() {
    if (pid_ <= 0) return;
    close(to_child_);
    close(from_child_);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  const std::string& address() const { return address_; }

  // Asks the child which of `keys` its store lacks ("missing: k1 k2 ").
  std::string Missing(const std::vector<std::string>& keys) {
    std::string all;
    for (const auto& k : keys) all += k + "\n";
    (void)!write(to_child_, all.data(), all.size());
    close(to_child_);
    to_child_ = -1;
    return ReadLine();
  }

 private:
  // One line from the child, waiting at most 20 s.
  std::string ReadLine() {
    std::string line;
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      pollfd p{from_child_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char c;
      if (read(from_child_, &c, 1) != 1 || c == '\n') break;
      line += c;
    }
    return line;
  }

  pid_t pid_ = -1;
  int from_child_ = -1, to_child_ = -1;
  std::string address_;
};

// Three ranks meet through the launcher's endpoint with hvd::Init() and allreduce.
TEST(KvServerJob, ThreeRanksInitAndAllreduceOverHvdRendezvous) {
  ServerProcess server;
  ASSERT_EQ(server.address().find("127.0.0.1:"), 0u) << server.address();
  const std::string url = "hvd://" + server.address();
  auto res = testing::RunRanks(3, [&](int rank, int size, const std::string&) -> Status {
    setenv("HVD_RANK", std::to_string(rank).c_str(), 1);
    setenv("HVD_SIZE", std::to_string(size).c_str(), 1);
    setenv("HVD_RENDEZVOUS", url.c_str(), 1);
    setenv("HVD_JOB_ID", "e2e", 1);
    setenv("HVD_JOB_SECRET", "secret-e2e", 1);
    setenv("HVD_START_TIMEOUT_SECONDS", "30", 1);
    setenv("HVD_PEER_TIMEOUT_SECONDS", "20", 1);
    HVD_RETURN_IF_ERROR(Init());
    std::vector<float> x(1000);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((rank + 1) * i);
    AllreduceOptions sum;
    sum.op = ReduceOp::kSum;
    Tensor t = MakeTensor(x.data(), DataType::kFloat32, static_cast<int64_t>(x.size()));
    HVD_RETURN_IF_ERROR(Allreduce("grad", t, t, sum));
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i] != static_cast<float>(6 * i)) {
        return Internal("element " + std::to_string(i) + " is " + std::to_string(x[i]) + ", want " +
                        std::to_string(6 * i));
      }
    }
    return Shutdown();
  });
  HVD_EXPECT_RANKS_OK(res);
  // The keys docs/rendezvous.md lists for a runtime job (on one host: the shared-memory mesh).
  std::vector<std::string> keys;
  for (int r = 0; r < 3; ++r) {
    keys.push_back("job/e2e/attempt/0/host/" + std::to_string(r));
    keys.push_back("job/e2e/attempt/0/shm/shm/" + std::to_string(r));
  }
  EXPECT_EQ(server.Missing(keys), "missing: ");
}

}  // namespace
}  // namespace hvd::launcherd
