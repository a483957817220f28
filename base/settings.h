// Typed settings read from the environment, declared where they are used (NCCL's style).
//
// Each setting has an hvd name (HVD_*), an optional Horovod alias (HOROVOD_*), a default and a
// one-line meaning; a number may have a valid range, and a setting that shapes the collectives is
// marked as one every rank must agree on. Every declared setting registers itself, so that
// docs/configuration.md can be checked against the code (tests/runtime/settings_doc_test.cc),
// Init can compare the agreed ones across ranks (runtime/core/job_settings.h) and log what the
// environment set (SettingsFromEnvironment).
//
//   const hvd::base::Setting<int64_t> kRingChunk(
//       "HVD_RING_CHUNK_BYTES", nullptr, 256 << 10, "the ring's chunk size",
//       {4096, int64_t{1} << 30}, hvd::base::kSameOnEveryRank);
//   int64_t bytes;
//   HVD_RETURN_IF_ERROR(kRingChunk.Get(&bytes));
//
// A value that does not parse, or lies outside the range, is an error naming the variable and the
// value, never a silent default.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "hvd/status.h"

namespace hvd::base {

// How a setting is shared and shown (bits, or'ed).
enum SettingFlags : unsigned {
  kPerRank = 0,
  // Shapes the collectives (fusion plan, algorithm, chunking, transport, cache slots): ranks that
  // disagreed would exchange mismatched bytes, so Init compares it across ranks.
  kSameOnEveryRank = 1u << 0,
  // Its value is never logged (SettingsFromEnvironment shows "(hidden)").
  kSecret = 1u << 1,
};

struct SettingInfo {
  std::string name;
  std::string alias;  // empty when Horovod has no such variable
  std::string default_text;
  std::string help;
  std::string range_text;  // "[4096, 1073741824]"; empty: any value that parses
  unsigned flags = kPerRank;

  bool same_on_every_rank() const { return (flags & kSameOnEveryRank) != 0; }
  bool secret() const { return (flags & kSecret) != 0; }
};

// Every setting declared in the linked program, in declaration order.
const std::vector<SettingInfo>& AllSettings();

// Returns the raw value of `name` (or else `alias`) from the environment; false when neither is set
// or both are empty. `*from` receives the variable the value came from.
bool LookupEnv(const std::string& name, const std::string& alias, std::string* value,
               std::string* from);

// The valid values of a numeric setting, bounds included. `what_to_do` replaces the default
// advice of the out-of-range message ("give a value in that range, or unset it for the default").
template <typename T>
struct Range {
  T min;
  T max;
  const char* what_to_do = nullptr;
};

// The one out-of-range error of every setting:
//   InvalidArgument("NAME=VALUE is out of range [MIN, MAX]: WHAT_TO_DO")
// CheckRange is for bounds known only at run time (HVD_RANK's depend on the size).
Status OutOfRange(const std::string& name, const std::string& value, const std::string& min,
                  const std::string& max, const std::string& what_to_do);
Status CheckRange(const std::string& name, int64_t value, int64_t min, int64_t max,
                  const std::string& what_to_do);

template <typename T>
class Setting {
 public:
  Setting(const char* name, const char* alias, T default_value, const char* help,
          unsigned flags = kPerRank);
  Setting(const char* name, const char* alias, T default_value, const char* help, Range<T> range,
          unsigned flags = kPerRank) requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
  Setting(const Setting&) = delete;
  Setting& operator=(const Setting&) = delete;

  // The environment's value, or the default when unset. InvalidArgument when malformed or out of
  // the range (naming the variable that was set).
  Status Get(T* out) const;
  // OK when `value` is in the range (always, without one): for a value given otherwise than
  // through the environment (hvd::InitOptions), reported under the setting's name.
  Status CheckRange(const T& value) const;
  const T& default_value() const { return default_; }
  const std::string& name() const { return name_; }
  // Whether the environment sets it (to anything: "-5" too); *as (if given): the name it is set
  // under, its HOROVOD_ alias where that one was.
  bool IsSet(std::string* as = nullptr) const;

 private:
  Status CheckRange(const T& value, const std::string& as) const;

  std::string name_;
  std::string alias_;
  T default_;
  bool has_range_ = false;
  T min_{};
  T max_{};
  std::string what_to_do_;
};

// A declared setting that the environment sets: what Init logs, so that a user sees what took
// effect (NCCL's breadcrumbs).
struct SettingFromEnv {
  std::string name;   // the setting's HVD_ name
  std::string from;   // the variable that set it: the name, or the Horovod alias
  std::string value;  // as set; "(hidden)" for a kSecret setting
  unsigned flags = kPerRank;

  // "HVD_FUSION_THRESHOLD=1048576 (from the environment)", or
  // "HVD_FUSION_THRESHOLD=1048576 (from HOROVOD_FUSION_THRESHOLD)".
  std::string Breadcrumb() const;
};

// Every declared setting the environment sets, once each, in name order.
std::vector<SettingFromEnv> SettingsFromEnvironment();

// Bounds that hvdrun checks up front (cli/horovodrun_flags.cc) and the runtime enforces
// (HVD_CACHE_CAPACITY's range): one number for both, so that no value passes one and fails the
// other.
inline constexpr int64_t kMaxCacheCapacity = int64_t{1} << 20;  // HVD_CACHE_CAPACITY, entries

// Parsers shared by Setting<T> and by callers that read values from elsewhere.
Status ParseInt64(const std::string& text, int64_t* out);
Status ParseDouble(const std::string& text, double* out);
Status ParseBool(const std::string& text, bool* out);  // 1/0, true/false, yes/no, on/off

extern template class Setting<int64_t>;
extern template class Setting<double>;
extern template class Setting<bool>;
extern template class Setting<std::string>;

}  // namespace hvd::base
