// Typed settings read from the environment, declared where they are used (NCCL's style).
//
// Each setting has an hvd name (HVD_*), an optional Horovod alias (HOROVOD_*), a default and a
// one-line meaning. Every declared setting registers itself so that docs/configuration.md can be
// checked against the code (tests/runtime/settings_doc_test.cc).
//
//   static const hvd::common::Setting<int64_t> kFusionThreshold(
//       "HVD_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", 128 << 20, "fusion buffer bytes");
//   int64_t bytes;
//   HVD_RETURN_IF_ERROR(kFusionThreshold.Get(&bytes));
//
// A value that does not parse is an error naming the variable and the value, never a silent
// default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::common {

struct SettingInfo {
  std::string name;
  std::string alias;  // empty when Horovod has no such variable
  std::string default_text;
  std::string help;
};

// Every setting declared in the linked program, in declaration order.
const std::vector<SettingInfo>& AllSettings();

// Returns the raw value of `name` (or else `alias`) from the environment; false when neither is set
// or both are empty. `*from` receives the variable the value came from.
bool LookupEnv(const std::string& name, const std::string& alias, std::string* value,
               std::string* from);

template <typename T>
class Setting {
 public:
  Setting(const char* name, const char* alias, T default_value, const char* help);
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;

  // The environment's value, or the default when unset. InvalidArgument when malformed.
  Status Get(T* out) const;
  const T& default_value() const { return default_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string alias_;
  T default_;
};

// Bounds that hvdrun checks up front (cli/horovodrun_flags.cc) and the runtime enforces
// (core/context.cc): one number for both, so that no value passes one and fails the other.
inline constexpr int64_t kMaxCacheCapacity = int64_t{1} << 20;  // HVD_CACHE_CAPACITY, entries

// Parsers shared by Setting<T> and by callers that read values from elsewhere.
Status ParseInt64(const std::string& text, int64_t* out);
Status ParseDouble(const std::string& text, double* out);
Status ParseBool(const std::string& text, bool* out);  // 1/0, true/false, yes/no, on/off

extern template class Setting<int64_t>;
extern template class Setting<double>;
extern template class Setting<bool>;
extern template class Setting<std::string>;

}  // namespace hvd::common
