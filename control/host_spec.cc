#include "control/host_spec.h"

#include <arpa/inet.h>

#include <cctype>
#include <cstdint>
#include <set>

#include "control/text.h"

namespace hvd::control {
namespace {

constexpr const char* kListForm = "the accepted form is HOST[:SLOTS],... e.g. -H a:4,b:4";
constexpr const char* kLineForm =
    "write one host per line as 'HOST', 'HOST slots=N' or 'HOST slots=N max_slots=M'";

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Host names and IPv4 addresses only: ':' separates slots, and anything else (spaces, '=', '/')
// is far more likely a typo than a real name.
Status CheckHost(std::string_view host) {
  if (host.empty()) return InvalidArgument("empty host name");
  if (host.size() > kMaxHostNameBytes) {
    return InvalidArgument("host '" + std::string(host.substr(0, 32)) + "...' is " +
                           std::to_string(host.size()) + " bytes long; host names have at most " +
                           std::to_string(kMaxHostNameBytes));
  }
  if (host.front() == '-' || host.front() == '.') {
    return InvalidArgument("host '" + std::string(host) + "' cannot start with '" +
                           std::string(1, host.front()) + "'");
  }
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    if (!ok) {
      return InvalidArgument("host '" + std::string(host) + "' contains '" + std::string(1, c) +
                             "'; host names use letters, digits, '.', '-' and '_'");
    }
  }
  return Status::OK();
}

// Digits only (no sign, no spaces, no "4x"), 1..kMaxSlotsPerHost.
Status ParseSlots(std::string_view text, const std::string& host, int* out) {
  const std::string what = "slots of host '" + host + "'";
  if (text.empty()) return InvalidArgument(what + " are empty; give a positive integer");
  int64_t v = 0;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) {
      return InvalidArgument(what + " must be a positive integer, not '" + std::string(text) + "'");
    }
    v = v * 10 + (c - '0');
    if (v > kMaxSlotsPerHost) {
      return InvalidArgument(what + " '" + std::string(text) + "' exceed the maximum of " +
                             std::to_string(kMaxSlotsPerHost));
    }
  }
  if (v == 0) return InvalidArgument(what + " must be at least 1, not '" + std::string(text) + "'");
  *out = static_cast<int>(v);
  return Status::OK();
}

// Rejects a host named twice: silently merging or overriding would place ranks on a host the
// user may have meant to list with different slots.
class DuplicateCheck {
 public:
  Status Add(const std::string& host) {
    if (!seen_.insert(Lower(host)).second) {
      return InvalidArgument("host '" + host +
                             "' is listed twice; list each host once with its total slots");
    }
    return Status::OK();
  }

 private:
  std::set<std::string> seen_;
};

// The fields after the host on a hostfile line: Open MPI's `slots=N` (or `slot=`, `count=`) and
// `max_slots=M` (or `max-slots=`), each at most once.
Status ParseHostFields(const std::vector<std::string_view>& fields, HostSlots* hs) {
  int max_slots = 0;
  bool have_slots = false, have_max = false;
  for (size_t i = 1; i < fields.size(); ++i) {
    const std::string_view f = fields[i];
    const size_t eq = f.find('=');
    const std::string_view key = f.substr(0, eq);
    const bool is_slots = key == "slots" || key == "slot" || key == "count";
    const bool is_max = key == "max_slots" || key == "max-slots";
    if (eq == std::string_view::npos) {
      return InvalidArgument("unknown field '" + std::string(f) +
                             "' (fields are KEY=VALUE, without spaces around '=')");
    }
    if (!is_slots && !is_max) return InvalidArgument("unknown field '" + std::string(f) + "'");
    bool& seen = is_slots ? have_slots : have_max;
    if (seen) return InvalidArgument("'" + std::string(key) + "' is given twice");
    seen = true;
    HVD_RETURN_IF_ERROR(ParseSlots(f.substr(eq + 1), hs->host, is_slots ? &hs->slots : &max_slots));
  }
  if (have_max && max_slots < hs->slots) {
    // A count the line did not give (1, or --slots-per-host) is capped at the line's limit, as
    // Open MPI caps its default; one the line gave contradicts it.
    if (!have_slots) {
      hs->slots = max_slots;
      return Status::OK();
    }
    return InvalidArgument("max_slots=" + std::to_string(max_slots) +
                           " is below slots=" + std::to_string(hs->slots));
  }
  return Status::OK();
}

}  // namespace

Status ParseHostList(std::string_view text, std::vector<HostSlots>* out, int default_slots) {
  if (Trim(text).empty()) return InvalidArgument("empty host list; " + std::string(kListForm));
  std::vector<HostSlots> hosts;
  DuplicateCheck dups;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view raw = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string_view entry = Trim(raw);
    const std::string where = "host list '" + std::string(text) + "': ";
    if (entry.empty()) {
      return InvalidArgument(where + "empty entry (stray ','?); " + kListForm);
    }
    HostSlots hs;
    hs.slots = default_slots;
    const size_t colon = entry.find(':');
    const std::string_view host = Trim(entry.substr(0, colon));
    Status s = CheckHost(host);
    if (s.ok()) hs.host = std::string(host);
    if (s.ok() && colon != std::string_view::npos) {
      const std::string_view slots = entry.substr(colon + 1);
      if (slots.find(':') != std::string_view::npos) {
        s = InvalidArgument("entry '" + std::string(entry) + "' has more than one ':'");
      } else {
        s = ParseSlots(Trim(slots), hs.host, &hs.slots);
      }
    }
    if (s.ok()) s = dups.Add(hs.host);
    if (!s.ok()) return InvalidArgument(where + s.message() + "; " + kListForm);
    hosts.push_back(std::move(hs));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  *out = std::move(hosts);
  return Status::OK();
}

Status ParseHostfile(std::string_view content, const std::string& source,
                     std::vector<HostSlots>* out, int default_slots) {
  std::vector<HostSlots> hosts;
  DuplicateCheck dups;
  int line_no = 0;
  for (const std::string_view line : SplitLines(StripUtf8Bom(content))) {
    ++line_no;
    const std::string_view body = Trim(line.substr(0, line.find('#')));
    if (body.empty()) continue;

    // Whitespace-separated fields: the host, then optionally slots=N.
    std::vector<std::string_view> fields;
    size_t i = 0;
    while (i < body.size()) {
      while (i < body.size() && std::isspace(static_cast<unsigned char>(body[i]))) ++i;
      size_t j = i;
      while (j < body.size() && !std::isspace(static_cast<unsigned char>(body[j]))) ++j;
      if (j > i) fields.push_back(body.substr(i, j - i));
      i = j;
    }
    HostSlots hs;
    hs.slots = default_slots;
    Status s = CheckHost(fields[0]);
    if (s.ok()) hs.host = std::string(fields[0]);
    if (s.ok()) s = ParseHostFields(fields, &hs);
    if (s.ok()) s = dups.Add(hs.host);
    if (!s.ok()) {
      return InvalidArgument("hostfile " + source + " line " + std::to_string(line_no) + " '" +
                             std::string(Trim(line)) + "': " + s.message() + "; " + kLineForm);
    }
    hosts.push_back(std::move(hs));
  }
  if (hosts.empty()) {
    return InvalidArgument("hostfile " + source + " lists no hosts; " + kLineForm);
  }
  *out = std::move(hosts);
  return Status::OK();
}

Status CheckHostName(std::string_view host) {
  return CheckHost(host);
}

Status CheckAddress(std::string_view address) {
  HVD_RETURN_IF_ERROR(CheckHost(address));
  // Only digits and dots is meant as an IPv4 address: 127.0.0.300 or 8.8.8.8.8 would otherwise
  // go to the resolver as a name and fail far from the flag that gave it.
  if (address.find_first_not_of("0123456789.") != std::string_view::npos) return Status::OK();
  in_addr parsed;
  if (inet_pton(AF_INET, std::string(address).c_str(), &parsed) == 1) return Status::OK();
  return InvalidArgument("'" + std::string(address) +
                         "' is no IPv4 address: four numbers from 0 to 255 joined by '.'");
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  int64_t total = 0;
  for (const HostSlots& h : hosts) total += h.slots;
  return total > INT32_MAX ? INT32_MAX : static_cast<int>(total);
}

std::string FormatHostList(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const HostSlots& h : hosts) {
    if (!out.empty()) out += ',';
    out += h.host + ":" + std::to_string(h.slots);
  }
  return out;
}

}  // namespace hvd::control
