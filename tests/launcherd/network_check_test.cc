// NetworkCheck's protocol without sockets: agents are fake links that record the probe steps
// sent to them; the test answers for them.
#include "launcherd/network_check.h"

#include <gtest/gtest.h>

#include <atomic>

#include "testutil/expect.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

class ProbeLink : public AgentLink {
 public:
  bool SendStartRank(const StartRankCommand&) override { return true; }
  bool SendStopJob(const StopJobCommand&) override { return true; }
  bool SendProbe(const ProbeCommand& c) override {
    std::lock_guard<std::mutex> lock(mu);
    probes.push_back(c);
    return true;
  }
  void Close() override {}
  std::vector<ProbeCommand> Probes() {
    std::lock_guard<std::mutex> lock(mu);
    return probes;
  }
  std::mutex mu;
  std::vector<ProbeCommand> probes;
};

class NetworkCheckTest : public ::testing::Test {
 protected:
  NetworkCheckTest() : registry_(60s) {
    NetworkCheckOptions o;
    o.dial_timeout = 100ms;
    o.answer_timeout = 300ms;
    check_ = std::make_unique<NetworkCheck>(o, &registry_);
    check_->SetOnDone([this] { ++done_; });
  }

  // host-a.. with eth0 10.0.0.(1+i)/24 (the advertised address) and docker0 172.17.0.1/16.
  void AddHosts(int n, const std::string& base = "10.0.0.") {
    for (int i = 0; i < n; ++i) {
      auto link = std::make_shared<ProbeLink>();
      AgentInfo info;
      info.host = std::string("host-") + static_cast<char>('a' + i);
      info.advertise_addr = base + std::to_string(1 + i);
      info.slots = 1;
      info.interfaces = {{"lo", "127.0.0.1", 8, true, true},
                         {"docker0", "172.17.0.1", 16, false, true},
                         {"eth0", info.advertise_addr, 24, false, true}};
      ids_.push_back(registry_.Register(info, link));
      links_.push_back(link);
    }
  }
  std::vector<control::RankSlot> Ranks(std::vector<int> hosts) {
    std::vector<control::RankSlot> ranks;
    for (size_t r = 0; r < hosts.size(); ++r) {
      control::RankSlot s;
      s.rank = static_cast<int>(r);
      s.agent_id = ids_[hosts[r]];
      ranks.push_back(s);
    }
    return ranks;
  }
  NetworkCheck::Verdict Check(const std::vector<control::RankSlot>& ranks,
                              const std::string& selectors = "", const std::string& job = "j1") {
    return check_->Check(job, selectors, ranks, &report_, &message_);
  }
  // Answers the last step sent to host i.
  void Listening(int i, int port) {
    ProbeReport r;
    r.probe_id = links_[i]->Probes().back().probe_id;
    r.step = ProbeStep::kListen;
    r.port = port;
    check_->OnReport(ids_[i], r);
  }
  void Dialed(int i, std::vector<bool> ok) {
    const ProbeCommand dial = links_[i]->Probes().back();
    ASSERT_EQ(dial.step, ProbeStep::kDial);
    ProbeReport r;
    r.probe_id = dial.probe_id;
    r.step = ProbeStep::kDial;
    for (size_t t = 0; t < dial.targets.size(); ++t) {
      r.dials.push_back({dial.targets[t].candidate, ok[t], ok[t] ? "" : "connect: refused", 5});
    }
    check_->OnReport(ids_[i], r);
  }

  AgentRegistry registry_;
  std::unique_ptr<NetworkCheck> check_;
  std::atomic<int> done_{0};
  std::vector<std::string> ids_;
  std::vector<std::shared_ptr<ProbeLink>> links_;
  control::NetworkReport report_;
  std::string message_;
};

TEST_F(NetworkCheckTest, OneHostNeedsNothing) {
  AddHosts(2);
  EXPECT_EQ(Check(Ranks({0, 0, 0})), NetworkCheck::Verdict::kReady);
  EXPECT_FALSE(report_.decided);
  EXPECT_TRUE(links_[0]->Probes().empty());
  // With a selector, one host is decided without a probe.
  EXPECT_EQ(Check(Ranks({1}), "docker0"), NetworkCheck::Verdict::kReady);
  EXPECT_EQ(report_.summary, "using docker0 (172.17.0.0/16) on its one host");
}

TEST_F(NetworkCheckTest, AgentsOnLoopbackAreOneMachine) {
  AddHosts(2, "127.0.0.");
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kReady);
  EXPECT_FALSE(report_.decided);
  EXPECT_TRUE(links_[0]->Probes().empty());
}

TEST_F(NetworkCheckTest, ListenThenDialThenDecide) {
  AddHosts(3);
  EXPECT_EQ(Check(Ranks({0, 0, 1, 2})), NetworkCheck::Verdict::kWait);
  EXPECT_EQ(message_, "checking the network between 3 hosts (2 candidate networks)");
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(links_[i]->Probes().size(), 1u);
    EXPECT_EQ(links_[i]->Probes()[0].step, ProbeStep::kListen);
    EXPECT_GE(links_[i]->Probes()[0].timeout_ms, 700);  // outlives both answers and the dials
  }
  // Asking again while it runs starts nothing new.
  EXPECT_EQ(Check(Ranks({0, 0, 1, 2})), NetworkCheck::Verdict::kWait);
  EXPECT_EQ(links_[0]->Probes().size(), 1u);

  Listening(0, 1000);
  Listening(1, 1001);
  EXPECT_EQ(links_[0]->Probes().size(), 1u);  // DIAL only once every port is known
  Listening(2, 1002);
  // host-b dials host-c (its successor) on each candidate: eth0 first, then docker0.
  const ProbeCommand dial = links_[1]->Probes().back();
  EXPECT_EQ(dial.step, ProbeStep::kDial);
  EXPECT_EQ(dial.timeout_ms, 100);
  ASSERT_EQ(dial.targets.size(), 2u);
  EXPECT_EQ(dial.targets[0].address, "10.0.0.3");
  EXPECT_EQ(dial.targets[0].port, 1002);
  EXPECT_EQ(dial.targets[0].expect_agent, ids_[2]);
  EXPECT_EQ(dial.targets[1].address, "172.17.0.1");
  EXPECT_EQ(links_[2]->Probes().back().targets[0].address, "10.0.0.1");  // the ring closes

  Dialed(0, {true, false});
  Dialed(1, {true, false});
  EXPECT_EQ(done_, 0);
  Dialed(2, {true, false});
  EXPECT_EQ(done_, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(links_[i]->Probes().back().step, ProbeStep::kDone);

  EXPECT_EQ(Check(Ranks({0, 0, 1, 2})), NetworkCheck::Verdict::kReady);
  EXPECT_TRUE(report_.ok);
  EXPECT_EQ(report_.summary,
            "using eth0 (10.0.0.0/24) on all 3 hosts; skipped docker0: host-a could not reach "
            "host-b at 172.17.0.1 (connect: refused)");
  EXPECT_EQ(report_.dials.size(), 6u);
  // Consumed: the next placement probes again.
  EXPECT_EQ(Check(Ranks({0, 1, 2})), NetworkCheck::Verdict::kWait);
}

TEST_F(NetworkCheckTest, NothingWorksFailsNamingThePairs) {
  AddHosts(2);
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kWait);
  Listening(0, 1000);
  Listening(1, 1001);
  Dialed(0, {false, false});
  Dialed(1, {true, false});
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kFail);
  EXPECT_EQ(message_,
            "no network works between all 2 hosts: eth0: host-a could not reach host-b at "
            "10.0.0.2 (connect: refused); docker0: host-a could not reach host-b at 172.17.0.1 "
            "(connect: refused)");
  EXPECT_FALSE(report_.ok);
}

TEST_F(NetworkCheckTest, ASilentAgentFailsTheCheckByItsDeadline) {
  AddHosts(3);
  EXPECT_EQ(Check(Ranks({0, 1, 2})), NetworkCheck::Verdict::kWait);
  Listening(0, 1000);
  Listening(2, 1002);  // host-b never answers
  for (int i = 0; i < 100 && done_ == 0; ++i) std::this_thread::sleep_for(20ms);
  ASSERT_EQ(done_, 1);
  EXPECT_EQ(Check(Ranks({0, 1, 2})), NetworkCheck::Verdict::kFail);
  EXPECT_EQ(message_,
            "the agent on host-b did not answer the network probe within 0.3 s (stuck, or older "
            "than the launcher?)");
}

TEST_F(NetworkCheckTest, AnAgentThatCannotListenFailsTheCheck) {
  AddHosts(2);
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kWait);
  ProbeReport r;
  r.probe_id = links_[1]->Probes().back().probe_id;
  r.step = ProbeStep::kListen;
  r.error = "probe listener on 0.0.0.0: Too many open files";
  check_->OnReport(ids_[1], r);
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kFail);
  EXPECT_EQ(message_,
            "host-b's agent could not open a probe listener: probe listener on 0.0.0.0: Too many "
            "open files");
}

TEST_F(NetworkCheckTest, AnotherPlacementStartsAnotherProbe) {
  AddHosts(3);
  EXPECT_EQ(Check(Ranks({0, 1})), NetworkCheck::Verdict::kWait);
  const std::string first = links_[0]->Probes().back().probe_id;
  EXPECT_EQ(Check(Ranks({0, 2})), NetworkCheck::Verdict::kWait);
  // The first probe's listeners are told to close; a new probe starts.
  EXPECT_EQ(links_[1]->Probes().back().step, ProbeStep::kDone);
  EXPECT_NE(links_[0]->Probes().back().probe_id, first);
  // A late answer to the first probe changes nothing.
  ProbeReport late;
  late.probe_id = first;
  late.step = ProbeStep::kListen;
  late.port = 5;
  check_->OnReport(ids_[1], late);
  EXPECT_EQ(done_, 0);
}

TEST_F(NetworkCheckTest, BadSelectorsAndMissingInterfacesFailAtOnce) {
  AddHosts(2);
  EXPECT_EQ(Check(Ranks({0, 1}), "10.0.0.0/99"), NetworkCheck::Verdict::kFail);
  EXPECT_HAS(message_, "--network-interface: '10.0.0.0/99' is not an IPv4 subnet");
  EXPECT_EQ(Check(Ranks({0, 1}), "ib0"), NetworkCheck::Verdict::kFail);
  EXPECT_HAS(message_, "ib0: host-a has no up interface ib0");
  EXPECT_TRUE(links_[0]->Probes().empty());
}

}  // namespace
}  // namespace hvd::launcherd
