// -H host lists and hostfiles (control/host_spec.h), read from users and, through job specs, from
// any gRPC client. Properties: no crash; on error the output is left unchanged; what parses is a
// list of valid, distinct hosts with 1..kMaxSlotsPerHost slots that FormatHostList writes back
// as -H text which parses to the same list.
#include <cctype>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "control/host_spec.h"
#include "fuzz_util.h"

namespace c = hvd::control;

namespace {

void CheckParsed(const std::vector<c::HostSlots>& hosts, const char* what) {
  std::set<std::string> seen;
  for (const c::HostSlots& h : hosts) {
    HVD_FUZZ_CHECK(c::CheckHostName(h.host).ok(), std::string(what) + " gave host '" + h.host + "'");
    HVD_FUZZ_CHECK(h.slots >= 1 && h.slots <= c::kMaxSlotsPerHost,
                   std::string(what) + " gave slots " + std::to_string(h.slots));
    std::string lower = h.host;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    HVD_FUZZ_CHECK(seen.insert(lower).second, std::string(what) + " gave '" + h.host + "' twice");
  }
  HVD_FUZZ_CHECK(c::TotalSlots(hosts) >= static_cast<int>(hosts.size()), "TotalSlots overflowed");
  std::vector<c::HostSlots> back;
  const hvd::Status s = c::ParseHostList(c::FormatHostList(hosts), &back);
  HVD_FUZZ_CHECK(s.ok(), std::string(what) + " result does not read back: " + s.ToString());
  HVD_FUZZ_CHECK(back == hosts, std::string(what) + " result changed through FormatHostList");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<c::HostSlots> sentinel = {{"unchanged", 7}};
  // Both default slot counts hvdrun uses: 1, and a --slots-per-host.
  for (int default_slots : {1, 4}) {
    std::vector<c::HostSlots> hosts = sentinel;
    if (c::ParseHostList(text, &hosts, default_slots).ok()) {
      CheckParsed(hosts, "ParseHostList");
    } else {
      HVD_FUZZ_CHECK(hosts == sentinel, "ParseHostList changed its output on error");
    }
    hosts = sentinel;
    if (c::ParseHostfile(text, "fuzz.hostfile", &hosts, default_slots).ok()) {
      CheckParsed(hosts, "ParseHostfile");
    } else {
      HVD_FUZZ_CHECK(hosts == sentinel, "ParseHostfile changed its output on error");
    }
  }
  (void)c::CheckHostName(text);
  return 0;
}
