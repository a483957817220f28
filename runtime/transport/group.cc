#include "transport/group.h"

#include <algorithm>

namespace hvd::runtime::transport {
namespace {

class GroupView final : public Transport {
 public:
  GroupView(Transport* parent, std::vector<int> members)
      : parent_(parent),
        members_(std::move(members)),
        rank_(static_cast<int>(std::lower_bound(members_.begin(), members_.end(), parent->rank()) -
                               members_.begin())) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  Link* link(int peer) override { return parent_->link(members_[peer]); }
  Status WaitReady(const std::vector<WaitItem>& items, Clock::time_point deadline) override {
    return parent_->WaitReady(items, deadline);  // the items already hold the parent's links
  }
  void Abort(const std::string& reason) override { parent_->Abort(reason); }

 private:
  Transport* const parent_;
  const std::vector<int> members_;
  const int rank_;
};

}  // namespace

std::unique_ptr<Transport> NewGroupView(Transport* parent, std::vector<int> members) {
  return std::make_unique<GroupView>(parent, std::move(members));
}

}  // namespace hvd::runtime::transport
