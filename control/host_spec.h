// Host specs: which hosts a job may use and how many ranks (slots) each takes, as users write them
// for horovodrun and mpirun: `-H a:4,b:4` on the command line, or a hostfile of `a slots=4` lines.
// Pure: no I/O, so hvdrun, the launcher and the tests share one exact grammar. Every error names
// the bad piece and the accepted form, because a typo here otherwise surfaces much later as a job
// that waits forever for a host that does not exist.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::control {

struct HostSlots {
  std::string host;
  int slots = 1;

  bool operator==(const HostSlots&) const = default;
};

// Upper bound on one host's slots: far above any real machine, low enough that sums never overflow.
inline constexpr int kMaxSlotsPerHost = 1 << 20;

// Parses `-H` text: comma-separated `host[:slots]` (slots default `default_slots`: 1, or
// horovodrun's --slots-per-host), e.g. "a:4,b:4" or "a,b". Spaces around entries are ignored.
// Empty entries, empty hosts, slots that are not a positive integer, hosts named twice
// (case-insensitively) and characters outside [A-Za-z0-9._-] are errors. `out` is left unchanged
// on error.
Status ParseHostList(std::string_view text, std::vector<HostSlots>* out, int default_slots = 1);

// Parses hostfile contents in Open MPI's syntax (which horovodrun and mpirun read): one host per
// line, `host`, `host slots=N` or `host slots=N max_slots=M` (also Open MPI's spellings `slot=`,
// `count=`, `max-slots=`; fields in any order); '#' starts a comment; blank lines are skipped;
// Windows line endings are accepted. hvd never places more than `slots` ranks on a host, so
// max_slots (Open MPI's oversubscription limit) is checked (at least `slots`) and then has nothing
// to limit. A host without slots gets `default_slots`, capped at its max_slots (as Open MPI caps
// its default). A leading UTF-8 byte order mark is skipped. Errors name `source` (the file's
// path), the line number and the line's text. `out` is left unchanged on error.
Status ParseHostfile(std::string_view content, const std::string& source,
                     std::vector<HostSlots>* out, int default_slots = 1);

// A host name or IPv4 address as -H and hostfiles accept it: [A-Za-z0-9._-], not starting with
// '-' or '.', at most kMaxHostNameBytes (DNS's limit). The launcher checks agents' and jobs' host
// names with it too (control/spec_limits.h), so both ends agree on what a host is.
inline constexpr size_t kMaxHostNameBytes = 253;
Status CheckHostName(std::string_view host);
// An address other hosts dial (hvd-agent --advertise-addr, hvd-launcherd --advertise-host): a
// host name as CheckHostName accepts it, and digits and dots only when it is a valid IPv4 address.
Status CheckAddress(std::string_view address);

// Sum of the slots.
int TotalSlots(const std::vector<HostSlots>& hosts);

// "a:4,b:4": the `-H` form, which ParseHostList reads back to the same list.
std::string FormatHostList(const std::vector<HostSlots>& hosts);

}  // namespace hvd::control
