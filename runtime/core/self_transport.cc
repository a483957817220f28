// The transport of a single-rank job. Collectives on one rank never touch a link, so any use is
// a bug in hvd and says so.
#include "core/context.h"

namespace hvd::runtime::core {
namespace {

class SelfTransport final : public transport::Transport {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  transport::Link* link(int) override { return nullptr; }
  Status WaitReady(const std::vector<transport::WaitItem>&, transport::Clock::time_point) override {
    return Internal("single-rank transport has no peers to wait for");
  }
  void Abort(const std::string&) override {}
};

}  // namespace

std::unique_ptr<transport::Transport> NewSelfTransport() {
  return std::make_unique<SelfTransport>();
}

}  // namespace hvd::runtime::core
