#include "stall/watched_transport.h"

#include <algorithm>

namespace hvd::runtime::stall {
namespace {

class WatchedTransport final : public transport::Transport {
 public:
  WatchedTransport(std::unique_ptr<transport::Transport> inner, StallReporter* reporter)
      : inner_(std::move(inner)), reporter_(reporter) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  transport::Link* link(int peer) override { return inner_->link(peer); }

  Status WaitReady(const std::vector<transport::WaitItem>& items,
                   transport::Clock::time_point deadline) override {
    thread_local std::vector<int> peers;  // no allocation per wait
    peers.clear();
    for (const transport::WaitItem& item : items) {
      if (item.link != nullptr) peers.push_back(item.link->peer());
    }
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    reporter_->WaitBegin(peers);
    Status s = inner_->WaitReady(items, deadline);
    reporter_->WaitEnd();
    return s;
  }

  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  const std::unique_ptr<transport::Transport> inner_;
  StallReporter* const reporter_;
};

}  // namespace

std::unique_ptr<transport::Transport> WatchWaits(std::unique_ptr<transport::Transport> inner,
                                                 StallReporter* reporter) {
  return std::make_unique<WatchedTransport>(std::move(inner), reporter);
}

}  // namespace hvd::runtime::stall
