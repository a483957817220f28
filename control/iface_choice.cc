#include "control/iface_choice.h"

#include <map>
#include <set>

namespace hvd::control {
namespace {

bool IsLoopbackAddress(const std::string& addr) {
  return addr.rfind("127.", 0) == 0;
}

// Each host's first up address that `match` accepts; false (and the host) when one has none.
template <typename Match>
bool Pick(const std::vector<ProbeHost>& hosts, const std::string& label, Match match, Candidate* c,
          std::string* missing_host) {
  c->label = label;
  for (const ProbeHost& h : hosts) {
    const NetInterface* found = nullptr;
    for (const NetInterface& i : h.interfaces) {
      if (i.up && match(i)) {
        found = &i;
        break;
      }
    }
    if (found == nullptr) {
      *missing_host = h.host;
      return false;
    }
    c->ifaces.push_back(found->name);
    c->addrs.push_back(found->address);
    c->prefix_lens.push_back(found->prefix_len);
  }
  return true;
}

// "10.77.0.0/24" when every host's address is in the same subnet, else the addresses.
std::string Where(const Candidate& c) {
  bool same = c.prefix_lens[0] > 0;
  Cidr first;
  same = same && ParseCidr(c.addrs[0] + "/" + std::to_string(c.prefix_lens[0]), &first).ok();
  for (size_t i = 1; same && i < c.addrs.size(); ++i) {
    same = c.prefix_lens[i] == first.prefix_len && CidrContains(first, c.addrs[i]);
  }
  if (same) return FormatCidr(first);
  std::string s;
  for (const std::string& a : c.addrs) s += (s.empty() ? "" : ", ") + a;
  return s;
}

std::string FailedPair(const std::vector<ProbeHost>& hosts, const Candidate& c,
                       const std::pair<int, int>& pair, const DialOutcome& o) {
  return hosts[pair.first].host + " could not reach " + hosts[pair.second].host + " at " +
         c.addrs[pair.second] + " (" + o.error + ")";
}

}  // namespace

Status BuildCandidates(const std::vector<ProbeHost>& hosts,
                       const std::vector<InterfaceSelector>& selectors, Candidates* out) {
  *out = Candidates();
  out->probe = hosts.size() > 1;
  std::string missing;
  if (!selectors.empty()) {
    for (const InterfaceSelector& s : selectors) {
      Candidate c;
      auto match = [&](const NetInterface& i) { return SelectorMatches(s, i); };
      if (Pick(hosts, s.text, match, &c, &missing)) {
        out->list.push_back(std::move(c));
      } else {
        out->impossible.push_back(s.text + ": " + missing + " has no up " +
                                  (s.is_cidr ? "address in " + s.text : "interface " + s.text));
      }
    }
  } else {
    Candidate route;
    route.label = "the advertised addresses";
    std::set<std::string> names;
    bool all_loopback = true;
    for (const ProbeHost& h : hosts) {
      const NetInterface* i = InterfaceWithAddress(h.interfaces, h.advertise_addr);
      route.ifaces.push_back(i != nullptr ? i->name : "");
      route.addrs.push_back(h.advertise_addr);
      route.prefix_lens.push_back(i != nullptr ? i->prefix_len : 0);
      names.insert(i != nullptr ? i->name : "");
      all_loopback = all_loopback && IsLoopbackAddress(h.advertise_addr);
    }
    if (names.size() == 1 && !names.begin()->empty()) route.label = *names.begin();
    out->list.push_back(route);
    if (all_loopback) {
      // Every agent reaches the launcher over loopback: the hosts are one machine (local mode,
      // tests), and no other network could be better than loopback.
      out->probe = false;
      return Status::OK();
    }
    // Every other interface up on all the hosts, by name (std::map orders them).
    std::map<std::string, int> hosts_with;
    for (const ProbeHost& h : hosts) {
      std::set<std::string> mine;
      for (const NetInterface& i : h.interfaces) {
        if (i.up && !i.loopback) mine.insert(i.name);
      }
      for (const std::string& n : mine) ++hosts_with[n];
    }
    for (const auto& [name, count] : hosts_with) {
      if (count != static_cast<int>(hosts.size())) continue;
      Candidate c;
      // A named copy: clang before 16 cannot capture a structured binding (scripts/fuzz.sh).
      const std::string& iface = name;
      auto match = [&](const NetInterface& i) { return i.name == iface && !i.loopback; };
      if (Pick(hosts, name, match, &c, &missing) && c.addrs != route.addrs) {
        out->list.push_back(std::move(c));
      }
    }
  }
  if (out->list.empty()) {
    std::string why;
    for (const std::string& s : out->impossible) why += (why.empty() ? "" : "; ") + s;
    std::string have;
    for (const ProbeHost& h : hosts) {
      have += (have.empty() ? "" : "; ") + h.host + ": " + FormatInterfaces(h.interfaces);
    }
    return InvalidArgument(
        "--network-interface selects no interface that every host of the job "
        "has (" +
        why + "). The hosts have: " + have);
  }
  return Status::OK();
}

std::vector<std::pair<int, int>> RingPairs(int n) {
  std::vector<std::pair<int, int>> pairs;
  if (n == 2) return {{0, 1}, {1, 0}};
  for (int i = 0; n > 2 && i < n; ++i) pairs.push_back({i, (i + 1) % n});
  return pairs;
}

NetworkReport Choose(const std::vector<ProbeHost>& hosts, const Candidates& candidates,
                     const ProbeOutcomes& outcomes) {
  NetworkReport r;
  r.decided = true;
  const auto pairs = RingPairs(static_cast<int>(hosts.size()));
  int chosen = -1;
  std::vector<std::string> skipped = candidates.impossible;
  for (size_t c = 0; c < candidates.list.size(); ++c) {
    const Candidate& cand = candidates.list[c];
    std::string first_failure;
    for (size_t p = 0; candidates.probe && p < pairs.size(); ++p) {
      const DialOutcome o = c < outcomes.size() && p < outcomes[c].size()
                                ? outcomes[c][p]
                                : DialOutcome{false, "no result", 0};
      r.dials.push_back({cand.label, hosts[pairs[p].first].host, hosts[pairs[p].second].host,
                         cand.addrs[pairs[p].second], o.ok, o.error, o.micros});
      if (!o.ok && first_failure.empty()) first_failure = FailedPair(hosts, cand, pairs[p], o);
    }
    if (!first_failure.empty()) {
      skipped.push_back(cand.label + ": " + first_failure);
    } else if (chosen < 0) {
      chosen = static_cast<int>(c);
    }
  }
  std::string skipped_text;
  for (const std::string& s : skipped) skipped_text += (skipped_text.empty() ? "" : "; ") + s;
  const std::string n = std::to_string(hosts.size());
  if (chosen < 0) {
    r.summary = "no network works between all " + n + " hosts: " + skipped_text;
    return r;
  }
  const Candidate& c = candidates.list[chosen];
  r.ok = true;
  r.chosen = c.label;
  for (size_t h = 0; h < hosts.size(); ++h) {
    r.hosts.push_back({hosts[h].host, hosts[h].agent_id, c.ifaces[h], c.addrs[h]});
  }
  r.summary = "using " + c.label + " (" + Where(c) + ") on " +
              (hosts.size() == 1 ? "its one host" : "all " + n + " hosts") +
              (skipped_text.empty() ? "" : "; skipped " + skipped_text);
  return r;
}

bool ChoiceFor(const NetworkReport& report, const std::string& agent_id, std::string* address,
               std::string* iface) {
  if (!report.ok) return false;
  for (const NetworkReport::HostChoice& h : report.hosts) {
    if (h.agent_id != agent_id) continue;
    *address = h.address;
    *iface = h.iface;
    return true;
  }
  return false;
}

}  // namespace hvd::control
