#include "base/settings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace hvd::base {
namespace {

std::vector<SettingInfo>& Registry() {
  static auto* r = new std::vector<SettingInfo>();
  return *r;
}
std::mutex& RegistryMu() {
  static auto* mu = new std::mutex();
  return *mu;
}

template <typename T>
std::string ToText(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
template <>
std::string ToText(const bool& v) {
  return v ? "1" : "0";
}
template <>
std::string ToText(const std::string& v) {
  return v.empty() ? "(unset)" : v;
}

Status Parse(const std::string& s, int64_t* out) {
  return ParseInt64(s, out);
}
Status Parse(const std::string& s, double* out) {
  return ParseDouble(s, out);
}
Status Parse(const std::string& s, bool* out) {
  return ParseBool(s, out);
}
Status Parse(const std::string& s, std::string* out) {
  *out = s;
  return Status::OK();
}

}  // namespace

const std::vector<SettingInfo>& AllSettings() {
  return Registry();
}

bool LookupEnv(const std::string& name, const std::string& alias, std::string* value,
               std::string* from) {
  for (const std::string* var : {&name, &alias}) {
    if (var->empty()) continue;
    const char* v = std::getenv(var->c_str());
    if (v != nullptr && *v != '\0') {
      *value = v;
      if (from != nullptr) *from = *var;
      return true;
    }
  }
  return false;
}

Status OutOfRange(const std::string& name, const std::string& value, const std::string& min,
                  const std::string& max, const std::string& what_to_do) {
  return InvalidArgument(name + "=" + value + " is out of range [" + min + ", " + max +
                         "]: " + what_to_do);
}

Status CheckRange(const std::string& name, int64_t value, int64_t min, int64_t max,
                  const std::string& what_to_do) {
  if (value >= min && value <= max) return Status::OK();
  return OutOfRange(name, std::to_string(value), std::to_string(min), std::to_string(max),
                    what_to_do);
}

Status ParseInt64(const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0') {
    return InvalidArgument("'" + text + "' is not an integer");
  }
  if (errno == ERANGE) {
    return InvalidArgument("'" + text + "' is out of the range of a 64-bit integer");
  }
  *out = v;
  return Status::OK();
}

Status ParseDouble(const std::string& text, double* out) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    return InvalidArgument("'" + text + "' is not a number");
  }
  *out = v;
  return Status::OK();
}

Status ParseBool(const std::string& text, bool* out) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") {
    *out = true;
  } else if (text == "0" || text == "false" || text == "no" || text == "off") {
    *out = false;
  } else {
    return InvalidArgument("'" + text + "' is not a boolean (use 1/0, true/false, yes/no, on/off)");
  }
  return Status::OK();
}

template <typename T>
Setting<T>::Setting(const char* name, const char* alias, T default_value, const char* help,
                    unsigned flags)
    : name_(name), alias_(alias == nullptr ? "" : alias), default_(std::move(default_value)) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  Registry().push_back(SettingInfo{name_, alias_, ToText(default_), help, "", flags});
}

template <typename T>
Setting<T>::Setting(const char* name, const char* alias, T default_value, const char* help,
                    Range<T> range,
                    unsigned flags) requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>)
    : name_(name),
      alias_(alias == nullptr ? "" : alias),
      default_(std::move(default_value)),
      has_range_(true),
      min_(range.min),
      max_(range.max) {
  what_to_do_ =
      range.what_to_do != nullptr
          ? range.what_to_do
          : "give a value in that range, or unset it for the default, " + ToText(default_);
  std::lock_guard<std::mutex> lock(RegistryMu());
  Registry().push_back(SettingInfo{name_, alias_, ToText(default_), help,
                                   "[" + ToText(min_) + ", " + ToText(max_) + "]", flags});
}

template <typename T>
Status Setting<T>::CheckRange(const T& value, const std::string& as) const {
  if (!has_range_ || (min_ <= value && value <= max_)) return Status::OK();
  return OutOfRange(as, ToText(value), ToText(min_), ToText(max_), what_to_do_);
}

template <typename T>
Status Setting<T>::CheckRange(const T& value) const {
  return CheckRange(value, name_);
}

template <typename T>
bool Setting<T>::IsSet(std::string* as) const {
  std::string raw, from;
  if (!LookupEnv(name_, alias_, &raw, &from)) return false;
  if (as != nullptr) *as = from;
  return true;
}

template <typename T>
Status Setting<T>::Get(T* out) const {
  std::string raw, from;
  if (!LookupEnv(name_, alias_, &raw, &from)) {
    *out = default_;
    return Status::OK();
  }
  Status s = Parse(raw, out);
  if (!s.ok()) {
    return InvalidArgument("environment variable " + from + "=" + raw + ": " + s.message() +
                           " (unset it to use the default, " + ToText(default_) + ")");
  }
  return CheckRange(*out, from);
}

std::string SettingFromEnv::Breadcrumb() const {
  return name + "=" + value + (from == name ? " (from the environment)" : " (from " + from + ")");
}

std::vector<SettingFromEnv> SettingsFromEnvironment() {
  std::vector<SettingInfo> all;
  {
    std::lock_guard<std::mutex> lock(RegistryMu());
    all = Registry();
  }
  std::sort(all.begin(), all.end(),
            [](const SettingInfo& a, const SettingInfo& b) { return a.name < b.name; });
  std::vector<SettingFromEnv> out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0 && all[i].name == all[i - 1].name) continue;  // declared twice: shown once
    SettingFromEnv e;
    if (!LookupEnv(all[i].name, all[i].alias, &e.value, &e.from)) continue;
    e.name = all[i].name;
    e.flags = all[i].flags;
    if (all[i].secret()) e.value = "(hidden)";
    out.push_back(std::move(e));
  }
  return out;
}

template class Setting<int64_t>;
template class Setting<double>;
template class Setting<bool>;
template class Setting<std::string>;

}  // namespace hvd::base
