// The Agent against a small in-test AgentGateway server (a real gRPC peer speaking the real
// protocol): registration, heartbeats, StartRank -> RUNNING + output + EXITED, exec failures,
// StopJob, Stop(), and what happens when the launcher goes away for longer or shorter than the
// lease. Workers are real processes; every test checks they are gone.
#include "agent/agent.h"
#include "agent/gpu_inventory.h"
#include "agent/host_info.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>

#include "agent/host_info.h"
#include "control/grpc_util.h"
#include "hvd/v1/agent.grpc.pb.h"

namespace hvd::agent {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
namespace v1 = hvd::v1;

constexpr char kToken[] = "test-token-0123456789";

// The state letter of /proc/<pid>/stat ('R', 'S', 'T'...), or 0 when there is no such process.
char ProcessState(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return 0;
  const auto paren = content.rfind(')');
  return paren != std::string::npos && paren + 2 < content.size() ? content[paren + 2] : 0;
}

bool ProcessAlive(int pid) {
  const char state = ProcessState(pid);
  return state != 0 && state != 'Z' && state != 'X';
}

// The launcher's side of AgentGateway.Connect, recording everything the agent sends.
class FakeGateway final : public v1::AgentGateway::Service {
 public:
  // `acks`: says it acknowledges rank events (it sends RankEventAck only when a test does).
  FakeGateway(int64_t lease_ms, bool acks) : lease_ms_(lease_ms), acks_(acks) {}

  grpc::Status Connect(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream) override {
    grpc::Status auth = control::CheckToken(*ctx, kToken);
    if (!auth.ok()) return auth;
    v1::AgentMessage first;
    if (!stream->Read(&first) || !first.has_register_()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "AgentInfo first");
    }
    v1::LauncherMessage ack;
    ack.mutable_ack()->set_agent_id("agent-1");
    ack.mutable_ack()->set_heartbeat_interval_ms(100);
    ack.mutable_ack()->set_lease_ms(lease_ms_);
    ack.mutable_ack()->set_acks_rank_events(acks_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      registrations_.push_back(first.register_());
      stream->Write(ack);
      stream_ = stream;
    }
    cv_.notify_all();
    v1::AgentMessage msg;
    while (stream->Read(&msg)) {
      std::lock_guard<std::mutex> lock(mu_);
      received_.push_back(msg);
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  bool Send(const v1::LauncherMessage& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    return stream_ != nullptr && stream_->Write(msg);
  }
  // Waits until `pred` holds over what was received (under the lock).
  bool WaitFor(const std::function<bool()>& pred, milliseconds timeout = milliseconds(10000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }
  // The first rank event matching, or nullptr (call under WaitFor or with the lock held).
  const v1::RankEvent* Event(const std::string& job, int rank, v1::RankState state) {
    for (const auto& m : received_) {
      if (m.has_rank_event() && m.rank_event().job_id() == job && m.rank_event().rank() == rank &&
          m.rank_event().state() == state) {
        return &m.rank_event();
      }
    }
    return nullptr;
  }
  bool HasLine(const std::string& job, int rank, const std::string& text) {  // lock held
    for (const auto& m : received_) {
      if (!m.has_output() || m.output().job_id() != job) continue;
      for (const auto& l : m.output().lines()) {
        if (l.rank() == rank && l.text() == text) return true;
      }
    }
    return false;
  }
  v1::RankEvent WaitEvent(const std::string& job, int rank, v1::RankState state) {
    v1::RankEvent e;
    EXPECT_TRUE(WaitFor([&] { return Event(job, rank, state) != nullptr; }))
        << "no " << v1::RankState_Name(state) << " for " << job << " rank " << rank;
    std::lock_guard<std::mutex> lock(mu_);
    if (const v1::RankEvent* found = Event(job, rank, state)) e = *found;
    return e;
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::AgentInfo> registrations_;
  std::vector<v1::AgentMessage> received_;

 private:
  const int64_t lease_ms_;
  const bool acks_;
  grpc::ServerReaderWriter<v1::LauncherMessage, v1::AgentMessage>* stream_ = nullptr;
};

class AgentTest : public ::testing::Test {
 protected:
  void StartLauncher(int64_t lease_ms, int port = 0, bool acks = false) {
    gateway_ = std::make_unique<FakeGateway>(lease_ms, acks);
    grpc::ServerBuilder builder;
    // What the real launcher must allow too: the agent's keepalive pings on a quiet stream.
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    builder.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(gateway_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port_);
  }
  void StopLauncher() {
    server_->Shutdown(std::chrono::system_clock::now());  // cancels the agent's stream at once
    server_->Wait();
    server_.reset();
  }
  void StartAgent(AgentOptions o = {}) {
    o.launcher = address_;
    if (o.token.empty()) o.token = kToken;
    o.wrapper_path = HVD_AGENT_PATH;
    ASSERT_TRUE(Agent::Start(o, &agent_).ok());
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    agent_.reset();
    if (server_) StopLauncher();
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);  // every worker was reaped
    EXPECT_EQ(errno, ECHILD);
  }
  static v1::LauncherMessage Start(const std::string& job, int rank,
                                   std::vector<std::string> argv) {
    v1::LauncherMessage m;
    v1::StartRank* s = m.mutable_start();
    s->set_job_id(job);
    s->set_attempt(0);
    s->mutable_placement()->set_rank(rank);
    s->mutable_placement()->set_slot(rank);
    for (auto& a : argv) s->add_argv(a);
    return m;
  }
  static v1::LauncherMessage StopJob(const std::string& job, int64_t grace_ms) {
    v1::LauncherMessage m;
    m.mutable_stop()->set_job_id(job);
    m.mutable_stop()->set_reason("cancelled by test");
    m.mutable_stop()->set_grace_ms(grace_ms);
    return m;
  }
  void WaitRegistered(size_t n = 1) {
    ASSERT_TRUE(gateway_->WaitFor([&] { return gateway_->registrations_.size() >= n; }));
  }

  std::unique_ptr<FakeGateway> gateway_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(AgentTest, RegistersWithItsFactsAndHeartbeats) {
  StartLauncher(5000);
  AgentOptions o;
  o.slots = 3;
  o.host = "test-host";
  StartAgent(o);
  WaitRegistered();
  v1::AgentInfo info = gateway_->registrations_[0];
  EXPECT_EQ(info.host(), "test-host");
  EXPECT_EQ(info.advertise_addr(), "127.0.0.1");
  EXPECT_EQ(info.slots(), 3);
  EXPECT_EQ(info.gpus(), static_cast<int>(GpuIds(static_cast<int>(DiscoverGpus().gpus.size()),
                                                 std::getenv("CUDA_VISIBLE_DEVICES"))
                                              .size()));
  EXPECT_EQ(info.pid(), getpid());
  EXPECT_FALSE(info.version().empty());
  EXPECT_TRUE(gateway_->WaitFor(
      [&] {
        int n = 0;
        for (const auto& m : gateway_->received_) n += m.has_heartbeat() ? 1 : 0;
        return n >= 3;  // 100 ms interval
      },
      milliseconds(5000)));
}

TEST_F(AgentTest, WrongTokenIsRefusedAndStopStaysPrompt) {
  StartLauncher(5000);
  AgentOptions o;
  o.token = "wrong-token";
  StartAgent(o);
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(gateway_->registrations_.empty());
  const auto t0 = Clock::now();
  agent_->Stop();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
}

TEST_F(AgentTest, StartRankReportsRunningOutputAndExit) {
  StartLauncher(5000);
  StartAgent();
  WaitRegistered();
  v1::LauncherMessage start =
      Start("j1", 2, {"/bin/sh", "-c", "echo \"hello $HVD_TEST_VAR\"; echo oops >&2; exit 3"});
  (*start.mutable_start()->mutable_env())["HVD_TEST_VAR"] = "world";
  ASSERT_TRUE(gateway_->Send(start));
  v1::RankEvent running = gateway_->WaitEvent("j1", 2, v1::RANK_RUNNING);
  EXPECT_GT(running.pid(), 0);
  v1::RankEvent exited = gateway_->WaitEvent("j1", 2, v1::RANK_EXITED);
  EXPECT_EQ(exited.exit_code(), 3);
  EXPECT_EQ(exited.signal(), 0);
  EXPECT_EQ(exited.stderr_tail(), "oops");
  EXPECT_EQ(exited.pid(), running.pid());

  // In order: RUNNING, the output, EXITED.
  std::lock_guard<std::mutex> lock(gateway_->mu_);
  std::vector<std::string> seen;
  for (const auto& m : gateway_->received_) {
    if (m.has_rank_event()) seen.push_back(v1::RankState_Name(m.rank_event().state()));
    if (m.has_output()) {
      EXPECT_EQ(m.output().job_id(), "j1");
      for (const auto& l : m.output().lines()) {
        EXPECT_EQ(l.rank(), 2);
        seen.push_back((l.stderr() ? "err:" : "out:") + l.text());
      }
    }
  }
  EXPECT_EQ(seen.front(), "RANK_RUNNING");
  EXPECT_EQ(seen.back(), "RANK_EXITED");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "out:hello world"), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), "err:oops"), seen.end());
}

// Many ranks writing fast: every line arrives, in order per rank and stream, before its exit.
TEST_F(AgentTest, OutputOfManyBusyRanksArrivesCompleteAndInOrder) {
  StartLauncher(5000);
  StartAgent();
  WaitRegistered();
  constexpr int kRanks = 8, kLines = 5000;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(gateway_->Send(Start(
        "busy", r,
        {"/bin/sh", "-c",
         "i=0; while [ $i -lt " + std::to_string(kLines) + " ]; do echo $i; i=$((i+1)); done"})));
  }
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(gateway_->WaitEvent("busy", r, v1::RANK_EXITED).exit_code(), 0);
  std::lock_guard<std::mutex> lock(gateway_->mu_);
  std::vector<int> next(kRanks, 0);
  std::vector<bool> exited(kRanks, false);
  for (const auto& m : gateway_->received_) {
    if (m.has_rank_event() && m.rank_event().state() == v1::RANK_EXITED) {
      exited[m.rank_event().rank()] = true;
    }
    if (!m.has_output()) continue;
    EXPECT_LE(m.output().lines_size(), 256);
    for (const auto& l : m.output().lines()) {
      ASSERT_FALSE(exited[l.rank()]) << "rank " << l.rank() << " output after its exit";
      ASSERT_EQ(l.text(), std::to_string(next[l.rank()])) << "rank " << l.rank();
      ++next[l.rank()];
    }
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(next[r], kLines) << "rank " << r;
}

TEST_F(AgentTest, ExecFailureIsReportedAsFailedToStart) {
  StartLauncher(5000);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j2", 0, {"./trian", "--epochs", "3"})));
  v1::RankEvent e = gateway_->WaitEvent("j2", 0, v1::RANK_FAILED_TO_START);
  EXPECT_NE(e.error().find("exec ./trian: No such file or directory"), std::string::npos)
      << e.error();
}

// An elastic job's hung worker (here SIGSTOPped) is stopped: the agent continues it with its
// SIGTERM, so that the signal is delivered; the job's other ranks go on.
TEST_F(AgentTest, StopRanksKillsAStoppedRankAndLeavesTheOthers) {
  StartLauncher(5000);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("e", 0, {"/bin/sleep", "100"})));
  ASSERT_TRUE(gateway_->Send(Start("e", 1, {"/bin/sh", "-c", "kill -STOP $$"})));
  const int pid0 = gateway_->WaitEvent("e", 0, v1::RANK_RUNNING).pid();
  const int pid1 = gateway_->WaitEvent("e", 1, v1::RANK_RUNNING).pid();
  ASSERT_TRUE(gateway_->WaitFor([&] { return ProcessState(pid1) == 'T'; })) << "not stopped";
  v1::LauncherMessage stop;  // attempt 0, SIGTERM first
  stop.mutable_stop_ranks()->set_job_id("e");
  stop.mutable_stop_ranks()->add_ranks(1);
  stop.mutable_stop_ranks()->set_reason("worker hung");
  stop.mutable_stop_ranks()->set_grace_ms(300);
  ASSERT_TRUE(gateway_->Send(stop));
  v1::RankEvent k = gateway_->WaitEvent("e", 1, v1::RANK_KILLED);
  EXPECT_EQ(k.signal(), SIGTERM);
  EXPECT_EQ(k.error(), "stopped by the launcher: worker hung");
  EXPECT_FALSE(ProcessAlive(pid1));
  EXPECT_TRUE(ProcessAlive(pid0));
}

TEST_F(AgentTest, StopJobKillsItsProcesses) {
  StartLauncher(5000);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j3", 0, {"/bin/sleep", "100"})));
  ASSERT_TRUE(
      gateway_->Send(Start("j3", 1, {"/bin/sh", "-c", "trap '' TERM; echo ready; sleep 100"})));
  ASSERT_TRUE(gateway_->Send(Start("other", 0, {"/bin/sleep", "100"})));
  const int pid0 = gateway_->WaitEvent("j3", 0, v1::RANK_RUNNING).pid();
  const int pid1 = gateway_->WaitEvent("j3", 1, v1::RANK_RUNNING).pid();
  const int other = gateway_->WaitEvent("other", 0, v1::RANK_RUNNING).pid();
  ASSERT_TRUE(gateway_->WaitFor([&] { return gateway_->HasLine("j3", 1, "ready"); }));
  ASSERT_TRUE(gateway_->Send(StopJob("j3", 300)));
  v1::RankEvent k0 = gateway_->WaitEvent("j3", 0, v1::RANK_KILLED);
  EXPECT_EQ(k0.signal(), SIGTERM);
  EXPECT_EQ(k0.error(), "stopped by the launcher: cancelled by test");
  v1::RankEvent k1 = gateway_->WaitEvent("j3", 1, v1::RANK_KILLED);
  EXPECT_EQ(k1.signal(), SIGKILL);  // ignored SIGTERM: killed after the grace
  EXPECT_FALSE(ProcessAlive(pid0));
  EXPECT_FALSE(ProcessAlive(pid1));
  EXPECT_TRUE(ProcessAlive(other));  // another job is untouched
  // Heartbeats now name only the job still running.
  const size_t seen = gateway_->received_.size();
  EXPECT_TRUE(gateway_->WaitFor([&] {
    for (size_t i = seen; i < gateway_->received_.size(); ++i) {
      const auto& m = gateway_->received_[i];
      if (m.has_heartbeat()) {
        return m.heartbeat().running_jobs_size() == 1 && m.heartbeat().running_jobs(0) == "other";
      }
    }
    return false;
  }));
  agent_->Stop();  // ends "other" too, and tells the launcher
  EXPECT_FALSE(ProcessAlive(other));
  v1::RankEvent k = gateway_->WaitEvent("other", 0, v1::RANK_KILLED);
  EXPECT_EQ(k.pid(), other);
  EXPECT_NE(k.error().find("was stopped"), std::string::npos) << k.error();
}

TEST_F(AgentTest, LauncherGoneLongerThanTheLeaseEndsEveryJob) {
  StartLauncher(/*lease_ms=*/500);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j4", 0, {"/bin/sleep", "100"})));
  const int pid = gateway_->WaitEvent("j4", 0, v1::RANK_RUNNING).pid();
  const int port = port_;
  const auto t0 = Clock::now();
  StopLauncher();
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(ProcessAlive(pid)) << "killed before the lease ran out";
  while (ProcessAlive(pid) && Clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
  // What happened meanwhile reaches the launcher once it is back.
  StartLauncher(500, port);
  v1::RankEvent killed = gateway_->WaitEvent("j4", 0, v1::RANK_KILLED);
  EXPECT_NE(killed.error().find("unreachable for"), std::string::npos) << killed.error();
}

TEST_F(AgentTest, LauncherBackWithinTheLeaseKeepsRanksAndReRegisters) {
  StartLauncher(/*lease_ms=*/5000);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j5", 0, {"/bin/sleep", "100"})));
  const int pid = gateway_->WaitEvent("j5", 0, v1::RANK_RUNNING).pid();
  const int port = port_;
  StopLauncher();
  StartLauncher(5000, port);  // a restarted launcher on the same address
  WaitRegistered();
  EXPECT_EQ(gateway_->registrations_[0].agent_id(), "agent-1");  // the id it had
  EXPECT_TRUE(gateway_->WaitFor([&] {
    for (const auto& m : gateway_->received_) {
      if (m.has_heartbeat() && m.heartbeat().running_jobs_size() == 1 &&
          m.heartbeat().running_jobs(0) == "j5") {
        return true;
      }
    }
    return false;
  }));
  EXPECT_TRUE(ProcessAlive(pid));
}

// A rank's exit waiting for a launcher that is gone costs the agent no CPU: its writer, with
// nothing to flush to, waits for the connector (it spun on the due report, a core per agent, for
// as long as the launcher was away). The report arrives once the launcher is back.
TEST_F(AgentTest, AReportWaitingForTheLauncherCostsNoCpu) {
  StartLauncher(/*lease_ms=*/5000);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j7", 0, {"/bin/sleep", "0.2"})));
  const int pid = gateway_->WaitEvent("j7", 0, v1::RANK_RUNNING).pid();
  const int port = port_;
  StopLauncher();
  const auto t0 = Clock::now();
  while (ProcessAlive(pid) && Clock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(ProcessAlive(pid));
  std::this_thread::sleep_for(milliseconds(200));  // reaped: the exit is in the outbox
  const auto cpu = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);  // this process's threads: the agent's (not its workers)
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000L + u.ru_utime.tv_usec +
           u.ru_stime.tv_usec;
  };
  const long before = cpu();
  std::this_thread::sleep_for(milliseconds(1000));
  const long used_us = cpu() - before;
  EXPECT_LT(used_us, 250000) << "the agent used " << used_us / 1000 << " ms of CPU in 1 s";
  StartLauncher(5000, port);
  EXPECT_EQ(gateway_->WaitEvent("j7", 0, v1::RANK_EXITED).exit_code(), 0);
}

// Issue 22: a rank's exit written to a stream that broke before the launcher applied it (this
// launcher never acks it) is sent again, first and in order, on the next stream; once acked it is
// not sent again.
TEST_F(AgentTest, UnackedRankEventsAreResentFirstAfterAReconnect) {
  StartLauncher(/*lease_ms=*/5000, 0, /*acks=*/true);
  StartAgent();
  WaitRegistered();
  ASSERT_TRUE(gateway_->Send(Start("j6", 0, {"/bin/sh", "-c", "exit 0"})));
  EXPECT_EQ(gateway_->WaitEvent("j6", 0, v1::RANK_RUNNING).seq(), 1u);
  EXPECT_EQ(gateway_->WaitEvent("j6", 0, v1::RANK_EXITED).seq(), 2u);
  const uint64_t incarnation = gateway_->registrations_[0].incarnation();
  EXPECT_NE(incarnation, 0u);
  const int port = port_;
  // Rank events before the first heartbeat of the current stream, by seq.
  auto resent = [&] {
    std::vector<uint64_t> seqs;
    EXPECT_TRUE(gateway_->WaitFor([&] {
      return std::any_of(gateway_->received_.begin(), gateway_->received_.end(),
                         [](const v1::AgentMessage& m) { return m.has_heartbeat(); });
    }));
    std::lock_guard<std::mutex> lock(gateway_->mu_);
    for (const auto& m : gateway_->received_) {
      if (m.has_heartbeat()) break;
      if (m.has_rank_event()) seqs.push_back(m.rank_event().seq());
    }
    return seqs;
  };
  StopLauncher();
  StartLauncher(5000, port, true);
  WaitRegistered();
  EXPECT_EQ(gateway_->registrations_[0].incarnation(), incarnation);
  EXPECT_EQ(resent(), (std::vector<uint64_t>{1, 2}));

  v1::LauncherMessage ack;
  ack.mutable_event_ack()->set_through_seq(2);
  ASSERT_TRUE(gateway_->Send(ack));
  std::this_thread::sleep_for(milliseconds(300));  // the agent reads it
  StopLauncher();
  StartLauncher(5000, port, true);
  WaitRegistered();
  EXPECT_TRUE(resent().empty());
}

}  // namespace
}  // namespace hvd::agent
