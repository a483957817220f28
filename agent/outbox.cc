#include "agent/outbox.h"

#include <algorithm>

#include "agent/launcher_client.h"

namespace hvd::agent {

void Outbox::AddEvent(const RankReport& event) {
  hvd::v1::AgentMessage m;
  ToProto(event, m.mutable_rank_event());
  AddMessage(std::move(m));
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
      out.push_back(std::move(item.message));
      batch = nullptr;  // lines after an event start a new batch, keeping the order
    } else {
      add_line(item.job_id, std::move(item.line));
    }
  }
  items_.clear();
  line_count_ = line_bytes_ = event_count_ = 0;
  return out;
}

void Outbox::PutBack(std::vector<hvd::v1::AgentMessage> messages) {
  base::MutexLock lock(&mu_);
  for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
    Item item;
    item.is_event = true;  // due at once, like an event
    item.message = std::move(*it);
    item.added = Clock::now();
    items_.push_front(std::move(item));
    ++event_count_;
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

void Outbox::Wake() {
  {
    base::MutexLock lock(&mu_);
    woken_ = true;
  }
  cv_.NotifyAll();
}

bool Outbox::empty() const {
  base::MutexLock lock(&mu_);
  return items_.empty() && dropped_.empty();
}

}  // namespace hvd::agent
