#include "common/settings.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <sstream>

namespace hvd::common {
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

Status ParseInt64(const std::string& text, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE) {
    return InvalidArgument("'" + text + "' is not an integer");
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
Setting<T>::Setting(const char* name, const char* alias, T default_value, const char* help)
    : name_(name), alias_(alias == nullptr ? "" : alias), default_(std::move(default_value)) {
  std::lock_guard<std::mutex> lock(RegistryMu());
  Registry().push_back(SettingInfo{name_, alias_, ToText(default_), help});
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
  return Status::OK();
}

template class Setting<int64_t>;
template class Setting<double>;
template class Setting<bool>;
template class Setting<std::string>;

}  // namespace hvd::common
