#include "agent_stream.h"

#include "control/token.h"
#include "sim_agent.h"

namespace hvd::bench {

AgentStream::AgentStream(SwarmShared* swarm, SimAgent* agent,
                         std::shared_ptr<grpc::Channel> channel)
    : swarm_(swarm),
      agent_(agent),
      stub_(v1::AgentGateway::NewStub(channel)),
      context_(std::make_unique<grpc::ClientContext>()) {
  context_->AddMetadata(control::kTokenMetadataKey, swarm->config.token);  // as every hvd call
}

void AgentStream::Start(const v1::AgentMessage& registration) {
  self_ = shared_from_this();
  {
    std::lock_guard<std::mutex> lock(swarm_->streams_mu);
    ++swarm_->live_streams;
  }
  const v1::AgentMessage* first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(registration);
    writing_ = true;
    first = &queue_.front();  // std::deque keeps element addresses on push_back
  }
  stub_->async()->Connect(context_.get(), this);
  AddHold();
  StartWrite(first);
  StartRead(&in_);
  StartCall();
}

bool AgentStream::Enqueue(v1::AgentMessage m) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(m));  // kept even when dead: TakeUnsent hands it back
  const auto depth = static_cast<int64_t>(queue_.size());
  int64_t max = swarm_->stats.max_write_queue.load(std::memory_order_relaxed);
  while (depth > max && !swarm_->stats.max_write_queue.compare_exchange_weak(max, depth)) {
  }
  if (!alive_ || writing_) return false;
  writing_ = true;
  return true;
}

bool AgentStream::ReleaseHoldLocked() {
  if (alive_ || kicking_ > 0 || hold_released_) return false;
  hold_released_ = true;
  return true;
}

void AgentStream::Kick() {
  const v1::AgentMessage* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!alive_ || queue_.empty()) {
      writing_ = false;
      return;
    }
    m = &queue_.front();
    ++kicking_;
  }
  StartWrite(m);  // no lock held: a reaction may run inline
  bool release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --kicking_;
    release = ReleaseHoldLocked();
  }
  if (release) RemoveHold();
}

void AgentStream::Cancel() {
  context_->TryCancel();
}

std::deque<v1::AgentMessage> AgentStream::TakeUnsent() {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<v1::AgentMessage> unsent;
  unsent.swap(queue_);
  return unsent;
}

void AgentStream::OnWriteDone(bool ok) {
  const v1::AgentMessage* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ok) {
      alive_ = false;  // the failed message stays queued: it may never have arrived
      writing_ = false;
    } else {
      if (!queue_.empty()) queue_.pop_front();
      if (alive_ && !queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
      }
    }
  }
  // In a reaction the call cannot finish under us: no hold is needed for this write.
  if (next != nullptr) StartWrite(next);
}

void AgentStream::OnReadDone(bool ok) {
  if (!ok) {
    bool release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      alive_ = false;
      release = ReleaseHoldLocked();
    }
    if (release) RemoveHold();
    return;
  }
  if (!acked_ && in_.msg_case() == v1::LauncherMessage::kAck) {
    acked_ = true;
    agent_->OnAck(this, in_.ack());
  } else if (!acked_) {
    swarm_->stats.AddError("the launcher's first message was not a RegisterAck (case " +
                           std::to_string(in_.msg_case()) + ")");
    context_->TryCancel();
  } else {
    agent_->OnCommand(this, in_);
  }
  StartRead(&in_);
}

void AgentStream::OnDone(const grpc::Status& status) {
  std::shared_ptr<AgentStream> keep = std::move(self_);
  SwarmShared* const swarm = swarm_;
  agent_->OnStreamDone(this, status, acked_);
  keep.reset();  // the last reference unless another thread is about to Kick or Cancel it
  std::lock_guard<std::mutex> lock(swarm->streams_mu);
  --swarm->live_streams;
  swarm->streams_cv.notify_all();
}

}  // namespace hvd::bench
