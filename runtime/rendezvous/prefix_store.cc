// A Store view that scopes every key under "<prefix>/", so a restarted job (new attempt prefix) or
// a second communicator never reads the keys of another over the same base store.
#include "rendezvous/store.h"

namespace hvd::runtime::rendezvous {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store* base) : prefix_(std::move(prefix) + "/"), base_(base) {}

  Status Set(std::string_view key, std::string_view value) override {
    return base_->Set(Full(key), value);
  }
  Status Get(std::string_view key, std::string* value) override {
    return base_->Get(Full(key), value);
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(Full(k));
    // The base's message lists the full keys, which is what an operator finds in the store.
    return base_->Wait(full, timeout);
  }
  Status Add(std::string_view key, int64_t delta, int64_t* new_value) override {
    return base_->Add(Full(key), delta, new_value);
  }
  std::string Describe() const override {
    return base_->Describe() + " (prefix '" + prefix_ + "')";
  }

 private:
  std::string Full(std::string_view key) const { return prefix_ + std::string(key); }

  const std::string prefix_;
  Store* const base_;
};

}  // namespace

std::unique_ptr<Store> NewPrefixStore(std::string prefix, Store* base) {
  return std::make_unique<PrefixStore>(std::move(prefix), base);
}

}  // namespace hvd::runtime::rendezvous
