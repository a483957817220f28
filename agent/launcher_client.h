// One AgentGateway.Connect stream to the launcher: opened with the cluster token, registered
// (AgentInfo first, RegisterAck awaited with a deadline), then read by one thread and written by
// one writer at a time. A broken stream is not repaired: the agent opens a new one.
//
// Also the agent's edge between hvd.v1 and its own types: StartRank becomes a RankSpec and a
// RankReport becomes a RankEvent here (rank_spec.h), so that nothing below sees protobuf.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "agent/rank_spec.h"
#include "base/mutex.h"
#include "control/tls.h"
#include "hvd/status.h"
#include "hvd/v1/agent.grpc.pb.h"

namespace hvd::agent {

// hvd.v1.StartRank -> RankSpec (the placement's rank and slot; the rest the agent does not use).
RankSpec RankSpecFromProto(const hvd::v1::StartRank& p);
// RankReport -> hvd.v1.RankEvent, the state through control/job_state_proto.h.
void ToProto(const RankReport& r, hvd::v1::RankEvent* p);

class LauncherStream {
 public:
  // A stream not yet started; Cancel() already works on it (the agent may stop meanwhile).
  LauncherStream(const std::shared_ptr<grpc::Channel>& channel, std::string address,
                 const std::string& token);
  // Opens the call, sends `info`, and waits up to `timeout` for the launcher's RegisterAck.
  // Errors name the launcher's address and what to do (token refused, not reachable, ...). Once.
  Status Register(const hvd::v1::AgentInfo& info, std::chrono::milliseconds timeout,
                  hvd::v1::RegisterAck* ack);
  ~LauncherStream();

  // Blocks for the next command; false once the stream has ended (then call Finish).
  bool Read(hvd::v1::LauncherMessage* msg);
  // One Write at a time (the sync API allows no more); false once the stream is broken.
  bool Write(const hvd::v1::AgentMessage& msg);
  // Half-closes the stream: nothing more will be written, and the launcher, having read all of
  // it, ends the call (Read then returns false). Under Write's rules.
  bool WritesDone();
  // Ends the stream from any thread: Read and Write return false soon after.
  void Cancel();
  // The stream's final status, after Read returned false (or Register failed). Idempotent.
  Status Finish();

 private:
  std::string address_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<hvd::v1::AgentGateway::Stub> stub_;
  std::unique_ptr<grpc::ClientReaderWriter<hvd::v1::AgentMessage, hvd::v1::LauncherMessage>>
      stream_;
  base::Mutex write_mu_;
  bool write_failed_ HVD_GUARDED_BY(write_mu_) = false;
  bool finished_ HVD_GUARDED_BY(write_mu_) = false;
  Status final_status_ HVD_GUARDED_BY(write_mu_);
};

}  // namespace hvd::agent
