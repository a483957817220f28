// A busy JobManager delays what agents said, never their liveness (launcherd/agent_inbox.h): the
// real AgentGateway, AgentRegistry and JobManager behind a gRPC server on 127.0.0.1, test agents
// on the wire (launcher_test_util.h), and JobManager's lock held from outside through ListPage
// (whose callback runs under it) for longer than the lease.
#include "tests/launcherd/agent_inbox_fixture.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;
using testing::StreamAgent;

// The failure: a launcher busy for longer than the lease declared healthy agents LOST,
// because their streams' readers waited for JobManager's lock before reading the next heartbeat.
TEST_F(AgentInboxTest, BusyManagerLosesNoAgentAndFailsNoJob) {
  BeatingAgent a(address_, "busy-1", 2);
  WaitAgent("busy-1");
  const std::string job = RunningJob(a, 2);

  // Heartbeats go on, and the ranks exit, all while the lock is held for three leases.
  std::thread hold = HoldLock(3 * kLease);
  std::this_thread::sleep_for(2 * kLease);
  a.agent.Event(job, 0, v1::RANK_EXITED, 0);
  a.agent.Event(job, 1, v1::RANK_EXITED, 0);
  std::this_thread::sleep_for(kLease / 2);
  EXPECT_EQ(Agent("busy-1").state, "READY") << "lost while the launcher was busy";
  hold.join();

  ASSERT_TRUE(gateway_->WaitApplied(5s));
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(lost_.empty()) << lost_.front().id << " declared LOST";
}

// Agents that flood the launcher while JobManager is busy fill their inbox queues: each is held
// back alone (its stream parks the message and stops reading; HTTP/2 flow control stops its
// sender), never by blocking one of gRPC's few callback threads, which would stop every other
// agent's lease renewal as well. Nothing is lost: once the lock is free every flood is applied
// in order, and the ranks' exits, sent after their floods, end the job SUCCEEDED.
TEST_F(AgentInboxTest, FloodingAgentsAreHeldBackAloneAndLoseNothing) {
  constexpr int kFlooders = 3;  // more than gRPC's callback threads on a 2-core machine (2)
  constexpr int kLines = 5000;  // past AgentInbox::kMaxQueued (4096)
  std::vector<std::unique_ptr<BeatingAgent>> agents;
  for (int i = 0; i <= kFlooders; ++i) {  // the last one only heartbeats
    const std::string host = "flood-" + std::to_string(i);
    agents.push_back(std::make_unique<BeatingAgent>(address_, host, 1));
    WaitAgent(host);
  }
  std::string job;
  ASSERT_TRUE(SubmitJob(&job, kFlooders + 1).ok());
  std::vector<int> rank_of(agents.size(), -1);
  for (size_t i = 0; i < agents.size(); ++i) {
    v1::LauncherMessage m;
    ASSERT_TRUE(agents[i]->agent.Next(&m, 5s));
    ASSERT_TRUE(m.has_start()) << m.ShortDebugString();
    rank_of[i] = m.start().placement().rank();
    agents[i]->agent.Event(job, rank_of[i], v1::RANK_RUNNING);
    agents[i]->beater.SetJob(job);
  }
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kRunning; });

  std::thread hold = HoldLock(3 * kLease);
  std::vector<std::thread> floods;
  for (int i = 0; i < kFlooders; ++i) {
    floods.emplace_back([&, i] {  // blocks in Write once the launcher stops reading it
      for (int n = 0; n < kLines; ++n) agents[i]->agent.Output(job, rank_of[i], std::to_string(n));
      agents[i]->agent.Event(job, rank_of[i], v1::RANK_EXITED, 0);
    });
  }
  std::this_thread::sleep_for(2 * kLease);
  for (int i = 0; i <= kFlooders; ++i) {
    EXPECT_EQ(Agent("flood-" + std::to_string(i)).state, "READY")
        << "flood-" << i << " lost while the launcher was busy";
  }
  agents[kFlooders]->agent.Event(job, rank_of[kFlooders], v1::RANK_EXITED, 0);
  hold.join();
  for (std::thread& t : floods) t.join();

  ASSERT_TRUE(gateway_->WaitApplied(20s));
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(lost_.empty()) << lost_.front().id << " declared LOST";
}

// A stream's reports still queued when its agent re-registered on a new stream are not applied:
// the new stream's first heartbeat says what runs.
TEST_F(AgentInboxTest, SupersededStreamsReportsAreDropped) {
  BeatingAgent a(address_, "re-1", 1);
  StreamAgent& old_stream = a.agent;
  const std::string id = WaitAgent("re-1");
  const std::string job = RunningJob(a, 1);

  std::thread hold = HoldLock(3 * kLease / 2);
  old_stream.Event(job, 0, v1::RANK_EXITED, 3);  // read and queued, not applied: the lock is held
  std::this_thread::sleep_for(100ms);
  // The agent comes back under its id on a new stream (the old one is closed by the registry).
  auto stub = v1::AgentGateway::NewStub(control::NewChannel(address_));
  auto ctx = testing::Ctx();
  ctx->set_deadline(std::chrono::system_clock::now() + 10s);
  auto fresh = stub->Connect(ctx.get());
  v1::AgentMessage reg;
  reg.mutable_register_()->set_agent_id(id);
  reg.mutable_register_()->set_host("re-1");
  reg.mutable_register_()->set_advertise_addr("127.0.0.1");
  reg.mutable_register_()->set_slots(1);
  ASSERT_TRUE(fresh->Write(reg));
  v1::LauncherMessage ack;
  ASSERT_TRUE(fresh->Read(&ack));
  ASSERT_EQ(ack.ack().agent_id(), id);
  std::mutex fresh_mu;
  Beater fresh_beater([&](const v1::AgentMessage& m) {
    std::lock_guard<std::mutex> lock(fresh_mu);
    return fresh->Write(m);
  });
  fresh_beater.SetJob(job);
  hold.join();
  old_stream.WaitClosed(5s);
  a.beater.Stop();

  ASSERT_TRUE(gateway_->WaitApplied(5s));
  JobStatus st = Job(job);
  EXPECT_EQ(st.state, JobState::kRunning) << st.reason;
  ASSERT_EQ(st.ranks.size(), 1u);
  EXPECT_EQ(st.ranks[0].state, RankState::kRunning) << "the old stream's exit was applied";

  // The new stream's reports are applied.
  v1::AgentMessage exited;
  exited.mutable_rank_event()->set_job_id(job);
  exited.mutable_rank_event()->set_rank(0);
  exited.mutable_rank_event()->set_state(v1::RANK_EXITED);
  {
    std::lock_guard<std::mutex> lock(fresh_mu);
    ASSERT_TRUE(fresh->Write(exited));
  }
  st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  fresh_beater.Stop();
  fresh->WritesDone();
  ctx->TryCancel();
  fresh->Finish();
}

// One stream's reports reach JobManager in the order they were sent, also when they wait in one
// batch: the job's history interleaves output and states as the agent sent them.
TEST_F(AgentInboxTest, ReportsKeepTheirOrder) {
  BeatingAgent a(address_, "order-1", 1);
  StreamAgent& agent = a.agent;
  WaitAgent("order-1");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start());

  std::thread hold = HoldLock(kLease);
  agent.Output(job, 0, "before running");
  agent.Event(job, 0, v1::RANK_RUNNING);
  agent.Output(job, 0, "while running");
  agent.Event(job, 0, v1::RANK_EXITED, 0);
  hold.join();
  ASSERT_TRUE(gateway_->WaitApplied(5s));
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kSucceeded; });

  WatchCursor cursor;
  std::vector<JobEvent> events;
  bool done = false;
  ASSERT_TRUE(jobs_->NextEvents(job, 0, false, 0ms, &cursor, &events, &done).ok());
  std::vector<std::string> seen;
  for (const JobEvent& e : events) {
    if (e.kind == JobEvent::Kind::kOutput) seen.push_back(e.output.text);
    if (e.kind == JobEvent::Kind::kStatus &&
        (seen.empty() || seen.back() != control::JobStateName(e.status.state))) {
      seen.push_back(control::JobStateName(e.status.state));
    }
  }
  const std::vector<std::string> want = {"STARTING", "before running", "RUNNING", "while running",
                                         "SUCCEEDED"};
  std::vector<std::string> got;
  for (const std::string& s : seen) {
    if (std::find(want.begin(), want.end(), s) != want.end()) got.push_back(s);
  }
  EXPECT_EQ(got, want);
}

// Numbered rank events (issue 22): acked with the highest seq applied, once per batch.
v1::AgentMessage SeqEvent(const std::string& job, v1::RankState state, int code, uint64_t seq) {
  v1::AgentMessage m;
  m.mutable_rank_event()->set_job_id(job);
  m.mutable_rank_event()->set_state(state);
  m.mutable_rank_event()->set_pid(5000);
  m.mutable_rank_event()->set_exit_code(code);
  m.mutable_rank_event()->set_seq(seq);
  return m;
}
// Reads RankEventAcks (skipping other commands) until one covers `seq`; its through_seq, or 0.
uint64_t WaitAck(StreamAgent& agent, uint64_t seq) {
  v1::LauncherMessage m;
  uint64_t last = 0;
  while (agent.Next(&m, 5s)) {
    if (!m.has_event_ack()) continue;
    EXPECT_GE(m.event_ack().through_seq(), last) << "acks never go back";
    last = m.event_ack().through_seq();
    if (last >= seq) return last;
  }
  ADD_FAILURE() << "no RankEventAck through " << seq << " (last " << last << ")";
  return 0;
}

// An event whose seq was applied before is dropped (the agent resends what an ack lost with its
// stream did not cover): here a "resend" of seq 1 that says the rank failed.
TEST_F(AgentInboxTest, RankEventsAreAckedAndAnAppliedSeqIsNotAppliedAgain) {
  BeatingAgent a(address_, "seq-1", 1, "", /*incarnation=*/7);
  WaitAgent("seq-1");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a.agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start()) << start.ShortDebugString();
  a.agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a.beater.SetJob(job);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kRunning; });
  EXPECT_EQ(WaitAck(a.agent, 1), 1u);

  a.agent.Send(SeqEvent(job, v1::RANK_EXITED, 1, 1));  // seq 1 again: ignored, acked again
  EXPECT_EQ(WaitAck(a.agent, 1), 1u);
  ASSERT_TRUE(gateway_->WaitApplied(5s));
  EXPECT_EQ(Job(job).state, JobState::kRunning) << "a duplicate seq was applied";
  a.agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));
  a.beater.SetJob("");
  EXPECT_EQ(WaitAck(a.agent, 2), 2u);
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
}

// The failure: a rank's exit written to a stream that broke before the launcher applied
// it. The agent re-registers within its lease and sends its unacknowledged events first; the old
// stream's copy is dropped (superseded), the resend applied once, and the job succeeds.
TEST_F(AgentInboxTest, AnExitLostWithABrokenStreamIsResentAndTheJobSucceeds) {
  auto a = std::make_unique<BeatingAgent>(address_, "seq-2", 1, "", /*incarnation=*/9);
  const std::string id = WaitAgent("seq-2");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a->agent.Next(&start, 5s));
  a->agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a->beater.SetJob(job);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kRunning; });
  WaitAck(a->agent, 1);

  std::thread hold = HoldLock(3 * kLease / 2);
  a->agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));  // read and queued, not applied
  std::this_thread::sleep_for(100ms);
  a.reset();  // the stream breaks
  for (int i = 0; i < 200 && Agent("seq-2").state == "READY"; ++i) std::this_thread::sleep_for(5ms);
  StreamAgent fresh(address_, "seq-2", 1, testing::kToken, id, /*incarnation=*/9);
  v1::LauncherMessage ack;
  ASSERT_TRUE(fresh.Next(&ack, 5s));
  ASSERT_EQ(ack.ack().agent_id(), id) << ack.ShortDebugString();
  fresh.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));  // unacked: resent first
  Beater beater([&](const v1::AgentMessage& m) {     // the rank is gone: no job listed
    fresh.Send(m);
    return true;
  });
  hold.join();
  JobStatus st = WaitJob(job, [](const JobStatus& s) { return s.state != JobState::kRunning; });
  EXPECT_EQ(st.state, JobState::kSucceeded) << st.reason;
  ASSERT_EQ(st.ranks.size(), 1u);
  EXPECT_EQ(st.ranks[0].state, RankState::kExited);
  EXPECT_EQ(WaitAck(fresh, 2), 2u);
  beater.Stop();
}

// An agent restarted with its --state-dir comes back under its id as another process
// (AgentInfo.incarnation) and numbers its events from 1 again: they are applied, not taken for
// the old process's.
TEST_F(AgentInboxTest, ARestartedAgentProcessNumbersItsEventsFromOneAgain) {
  auto a = std::make_unique<BeatingAgent>(address_, "seq-3", 1, "", /*incarnation=*/11);
  const std::string id = WaitAgent("seq-3");
  std::string job;
  ASSERT_TRUE(SubmitJob(&job).ok());
  v1::LauncherMessage start;
  ASSERT_TRUE(a->agent.Next(&start, 5s));
  a->agent.Send(SeqEvent(job, v1::RANK_RUNNING, 0, 1));
  a->agent.Send(SeqEvent(job, v1::RANK_EXITED, 0, 2));
  EXPECT_EQ(WaitAck(a->agent, 2), 2u);
  WaitJob(job, [](const JobStatus& s) { return s.state == JobState::kSucceeded; });
  a.reset();
  for (int i = 0; i < 200 && Agent("seq-3").state == "READY"; ++i) std::this_thread::sleep_for(5ms);

  BeatingAgent b(address_, "seq-3", 1, id, /*incarnation=*/12);
  std::string job2;
  ASSERT_TRUE(SubmitJob(&job2).ok());
  ASSERT_TRUE(b.agent.Next(&start, 5s));
  ASSERT_TRUE(start.has_start()) << start.ShortDebugString();
  b.agent.Send(SeqEvent(job2, v1::RANK_RUNNING, 0, 1));
  b.beater.SetJob(job2);
  EXPECT_EQ(WaitAck(b.agent, 1), 1u);
  WaitJob(job2, [](const JobStatus& s) { return s.state == JobState::kRunning; });
}

}  // namespace
}  // namespace hvd::launcherd
