#include "agent/outbox.h"

#include <algorithm>

#include "agent/launcher_client.h"
#include "base/logging.h"

namespace hvd::agent {

namespace {
// While the launcher acknowledges nothing beyond the bound, one line this often.
constexpr std::chrono::seconds kTrimLogEvery{30};
}  // namespace

uint64_t Outbox::AddEvent(const RankReport& event) {
  hvd::v1::AgentMessage m;
  ToProto(event, m.mutable_rank_event());
  uint64_t seq;
  {
    base::MutexLock lock(&mu_);
    seq = next_seq_++;
    m.mutable_rank_event()->set_seq(seq);
    Item item;
    item.is_event = true;
    item.added = Clock::now();
    if (track_acks_) {
      item.seq = seq;
      unacked_[seq] = Unacked{std::move(m), /*queued=*/true};
    } else {
      item.message = std::move(m);
    }
    items_.push_back(std::move(item));
    ++event_count_;
  }
  cv_.NotifyAll();
  return seq;
}

void Outbox::AddMessage(hvd::v1::AgentMessage message) {
  {
    base::MutexLock lock(&mu_);
    Item item;
    item.is_event = true;
    item.message = std::move(message);
    item.added = Clock::now();
    items_.push_back(std::move(item));
    ++event_count_;
  }
  cv_.NotifyAll();
}

void Outbox::AddLine(const std::string& job_id, int rank, bool is_stderr, std::string text) {
  bool notify;
  {
    base::MutexLock lock(&mu_);
    while (line_count_ > 0 && line_bytes_ + text.size() > limits_.max_buffered_bytes) {
      DropOldestLineLocked();
    }
    Item item;
    item.job_id = job_id;
    item.line.set_rank(rank);
    item.line.set_stderr(is_stderr);
    line_bytes_ += text.size();
    item.line.set_text(std::move(text));
    item.added = Clock::now();
    items_.push_back(std::move(item));
    ++line_count_;
    notify = line_count_ >= limits_.batch_lines || line_bytes_ >= limits_.batch_bytes;
  }
  if (notify) cv_.NotifyAll();
}

void Outbox::DropOldestLineLocked() {
  auto it = std::find_if(items_.begin(), items_.end(), [](const Item& i) { return !i.is_event; });
  if (it == items_.end()) return;
  ++dropped_[{it->job_id, it->line.rank()}];
  line_bytes_ -= it->line.text().size();
  --line_count_;
  items_.erase(it);
}

bool Outbox::DueLocked(Clock::time_point now) const {
  if (event_count_ > 0 || !dropped_.empty()) return true;
  if (line_count_ == 0) return false;
  if (line_count_ >= limits_.batch_lines || line_bytes_ >= limits_.batch_bytes) return true;
  for (const Item& i : items_) {  // the oldest line is at (or very near) the front
    if (!i.is_event) return now - i.added >= limits_.flush_interval;
  }
  return false;
}

std::vector<hvd::v1::AgentMessage> Outbox::Take(Clock::time_point now, bool all) {
  base::MutexLock lock(&mu_);
  // Here, not after the last Take: what it returned has been written or put back by now.
  TrimUnackedLocked();
  std::vector<hvd::v1::AgentMessage> out;
  if (items_.empty() && dropped_.empty()) return out;
  if (!all && !DueLocked(now)) return out;

  hvd::v1::OutputBatch* batch = nullptr;
  size_t batch_bytes = 0;
  const auto add_line = [&](const std::string& job_id, hvd::v1::OutputLine line) {
    if (batch == nullptr || batch->job_id() != job_id ||
        static_cast<size_t>(batch->lines_size()) >= limits_.batch_lines ||
        batch_bytes + line.text().size() > limits_.batch_bytes) {
      out.emplace_back();
      batch = out.back().mutable_output();
      batch->set_job_id(job_id);
      batch_bytes = 0;
    }
    batch_bytes += line.text().size();
    *batch->add_lines() = std::move(line);
  };
  // Dropped lines were the oldest: say so where they would have been.
  for (const auto& [key, count] : dropped_) {
    hvd::v1::OutputLine marker;
    marker.set_rank(key.second);
    marker.set_stderr(true);
    marker.set_text("[hvd-agent: " + std::to_string(count) +
                    " lines of output dropped: the launcher was unreachable or not keeping up]");
    add_line(key.first, std::move(marker));
  }
  dropped_.clear();
  for (Item& item : items_) {
    if (item.is_event) {
      if (item.seq != 0) {  // kept until acked: a copy goes out
        auto u = unacked_.find(item.seq);
        if (u == unacked_.end() || !u->second.queued) continue;  // acked meanwhile
        u->second.queued = false;
        ++written_unacked_;
        out.push_back(u->second.message);
      } else {
        out.push_back(std::move(item.message));
      }
      batch = nullptr;  // lines after an event start a new batch, keeping the order
    } else {
      add_line(item.job_id, std::move(item.line));
    }
  }
  items_.clear();
  line_count_ = line_bytes_ = event_count_ = 0;
  return out;
}

void Outbox::TrimUnackedLocked() {
  if (written_unacked_ <= limits_.max_unacked_events) return;
  size_t excess = written_unacked_ - limits_.max_unacked_events;
  uint64_t exits = 0;
  // A RANK_RUNNING report matters less than an exit: the heartbeat's running jobs stand for it.
  for (bool running_only : {true, false}) {
    for (auto it = unacked_.begin(); it != unacked_.end() && excess > 0;) {
      const bool running = it->second.message.rank_event().state() == hvd::v1::RANK_RUNNING;
      if (it->second.queued || (running_only && !running)) {
        ++it;
        continue;
      }
      (running ? trimmed_running_ : exits) += 1;
      it = unacked_.erase(it);
      --excess;
      --written_unacked_;
    }
  }
  trimmed_exits_ += exits;
  const auto now = Clock::now();
  if (exits == 0 && trim_logged_ != Clock::time_point{} && now - trim_logged_ < kTrimLogEvery) {
    return;
  }
  trim_logged_ = now;
  HVD_LOG(WARNING) << "the launcher has not acknowledged " << written_unacked_
                   << " rank event(s) written to it (kept at most " << limits_.max_unacked_events
                   << "); forgot " << trimmed_running_ << " RUNNING and " << trimmed_exits_
                   << " exit report(s) so far, which are not sent again if the stream breaks "
                      "before the launcher applied them. The launcher is overloaded or stuck: "
                      "see its log and /metrics";
}

void Outbox::PushFrontLocked(Item item) {
  item.is_event = true;  // due at once, like an event
  item.added = Clock::now();
  items_.push_front(std::move(item));
  ++event_count_;
}

void Outbox::Reconnected(bool acks) {
  base::MutexLock lock(&mu_);
  // Written before anything still queued was taken: they go in front of it, in seq order.
  for (auto it = unacked_.rbegin(); it != unacked_.rend(); ++it) {
    if (it->second.queued) continue;
    it->second.queued = true;
    Item item;
    item.seq = it->first;
    PushFrontLocked(std::move(item));
  }
  written_unacked_ = 0;
  if (!acks) {  // an older launcher: each goes out once more as a plain message, then forgotten
    for (Item& item : items_) {
      if (item.seq == 0) continue;
      auto u = unacked_.find(item.seq);
      if (u == unacked_.end()) continue;  // acked: removed below
      item.message = std::move(u->second.message);
      item.seq = 0;
    }
    std::erase_if(items_, [](const Item& i) { return i.seq != 0; });
    unacked_.clear();
  }
  track_acks_ = acks;
}

void Outbox::Ack(uint64_t through_seq) {
  base::MutexLock lock(&mu_);
  // Queued copies of these stay in items_ and are skipped by Take (not found here).
  while (!unacked_.empty() && unacked_.begin()->first <= through_seq) {
    if (!unacked_.begin()->second.queued) --written_unacked_;
    unacked_.erase(unacked_.begin());
  }
}

size_t Outbox::unacked() const {
  base::MutexLock lock(&mu_);
  return unacked_.size();
}

void Outbox::PutBack(std::vector<hvd::v1::AgentMessage> messages) {
  base::MutexLock lock(&mu_);
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    Item item;
    const uint64_t seq = it->has_rank_event() ? it->rank_event().seq() : 0;
    auto u = seq != 0 ? unacked_.find(seq) : unacked_.end();
    if (u != unacked_.end()) {
      // Queued already: Reconnected ran while the old stream's write failed.
      if (u->second.queued) continue;
      u->second.queued = true;
      --written_unacked_;
      item.seq = seq;
    } else if (seq != 0 && track_acks_) {
      continue;  // acked (or forgotten beyond the bound) meanwhile
    } else {
      item.message = std::move(*it);
    }
    PushFrontLocked(std::move(item));
  }
}

void Outbox::WaitDue(Clock::time_point until) {
  base::MutexLock lock(&mu_);
  while (true) {
    if (woken_) {
      woken_ = false;
      return;
    }
    const auto now = Clock::now();
    if (now >= until || DueLocked(now)) return;
    auto next = until;
    if (line_count_ > 0) next = std::min(next, now + limits_.flush_interval);
    cv_.WaitUntil(lock, next);
  }
}

void Outbox::WaitWoken(Clock::time_point until) {
  base::MutexLock lock(&mu_);
  while (!woken_ && Clock::now() < until) cv_.WaitUntil(lock, until);
  woken_ = false;
}

void Outbox::Wake() {
  {
    base::MutexLock lock(&mu_);
    woken_ = true;
  }
  cv_.NotifyAll();
}

bool Outbox::empty() const {
  base::MutexLock lock(&mu_);
  return items_.empty() && dropped_.empty() && unacked_.empty();
}

}  // namespace hvd::agent
