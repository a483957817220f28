#include "control/netif.h"

#include <set>

namespace hvd::control {
namespace {

constexpr size_t kMaxInterfaceName = 15;  // IFNAMSIZ - 1

const char* kSelectorHelp =
    "; give interface names or IPv4 subnets, comma-separated (--network-interface eth1,ib0 or "
    "--network-interface 10.0.0.0/8)";

bool AllDigitsAndDots(const std::string& s) {
  for (char c : s) {
    if ((c < '0' || c > '9') && c != '.') return false;
  }
  return !s.empty();
}

Status CheckInterfaceName(const std::string& name) {
  if (name.size() > kMaxInterfaceName) {
    return InvalidArgument("'" + name + "' is not an interface name: longer than " +
                           std::to_string(kMaxInterfaceName) + " characters" + kSelectorHelp);
  }
  for (char c : name) {
    if (c <= ' ' || c == '/' || c == ':' || c == '=' || c > '~') {
      return InvalidArgument("'" + name + "' is not an interface name: it holds '" +
                             std::string(1, c) + "'" + kSelectorHelp);
    }
  }
  return Status::OK();
}

uint32_t Mask(int prefix_len) {
  return prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - prefix_len);
}

}  // namespace

std::string FormatInterface(const NetInterface& i) {
  std::string s = i.name + " " + i.address + "/" + std::to_string(i.prefix_len);
  if (!i.up) s += " (down)";
  return s;
}

std::string FormatInterfaces(const std::vector<NetInterface>& list) {
  if (list.empty()) return "none";
  std::string s;
  for (const NetInterface& i : list) s += (s.empty() ? "" : ", ") + FormatInterface(i);
  return s;
}

Status ParseIPv4(const std::string& text, uint32_t* out) {
  uint32_t value = 0;
  size_t pos = 0;
  for (int octet = 0; octet < 4; ++octet) {
    if (octet > 0) {
      if (pos >= text.size() || text[pos] != '.') break;
      ++pos;
    }
    const size_t start = pos;
    uint32_t v = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 3) {
      v = v * 10 + static_cast<uint32_t>(text[pos++] - '0');
    }
    if (pos == start || v > 255) {
      return InvalidArgument("'" + text +
                             "' is not an IPv4 address (four numbers 0-255 joined by "
                             "dots, like 10.0.0.2)");
    }
    value = value << 8 | v;
    if (octet == 3 && pos == text.size()) {
      *out = value;
      return Status::OK();
    }
  }
  return InvalidArgument("'" + text +
                         "' is not an IPv4 address (four numbers 0-255 joined by dots, like "
                         "10.0.0.2)");
}

std::string FormatIPv4(uint32_t a) {
  return std::to_string(a >> 24) + "." + std::to_string(a >> 16 & 255) + "." +
         std::to_string(a >> 8 & 255) + "." + std::to_string(a & 255);
}

Status ParseCidr(const std::string& text, Cidr* out) {
  const size_t slash = text.find('/');
  uint32_t addr = 0;
  Status s = ParseIPv4(text.substr(0, slash), &addr);
  if (!s.ok()) {
    return InvalidArgument("'" + text + "' is not an IPv4 subnet: " + s.message() +
                           "; write it as ADDRESS/BITS, like 10.0.0.0/8");
  }
  int bits = 32;
  if (slash != std::string::npos) {
    const std::string len = text.substr(slash + 1);
    bool digits = !len.empty() && len.size() <= 2;
    for (char c : len) digits = digits && c >= '0' && c <= '9';
    bits = digits ? std::stoi(len) : -1;
    if (bits < 0 || bits > 32) {
      return InvalidArgument("'" + text +
                             "' is not an IPv4 subnet: the prefix length after '/' "
                             "must be 0 to 32, like 10.0.0.0/8");
    }
  }
  out->prefix_len = bits;
  out->network = addr & Mask(bits);
  return Status::OK();
}

bool CidrContains(const Cidr& cidr, uint32_t address) {
  return (address & Mask(cidr.prefix_len)) == cidr.network;
}

bool CidrContains(const Cidr& cidr, const std::string& address) {
  uint32_t a = 0;
  return ParseIPv4(address, &a).ok() && CidrContains(cidr, a);
}

std::string FormatCidr(const Cidr& cidr) {
  return FormatIPv4(cidr.network) + "/" + std::to_string(cidr.prefix_len);
}

Status ParseInterfaceSelectors(const std::string& text, std::vector<InterfaceSelector>* out) {
  out->clear();
  if (text.empty()) return Status::OK();
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    InterfaceSelector sel;
    sel.text = text.substr(start, comma - start);
    start = comma + 1;
    if (sel.text.empty()) {
      return InvalidArgument("'" + text + "' has an empty entry" + kSelectorHelp);
    }
    if (!seen.insert(sel.text).second) {
      return InvalidArgument("'" + text + "' names " + sel.text + " twice" + kSelectorHelp);
    }
    if (sel.text.find('/') != std::string::npos || AllDigitsAndDots(sel.text)) {
      sel.is_cidr = true;
      HVD_RETURN_IF_ERROR(ParseCidr(sel.text, &sel.cidr));
    } else {
      HVD_RETURN_IF_ERROR(CheckInterfaceName(sel.text));
    }
    out->push_back(std::move(sel));
  }
  return Status::OK();
}

bool SelectorMatches(const InterfaceSelector& s, const NetInterface& i) {
  return s.is_cidr ? CidrContains(s.cidr, i.address) : s.text == i.name;
}

bool AnySelectorMatches(const std::vector<InterfaceSelector>& selectors, const NetInterface& i) {
  if (selectors.empty()) return true;
  for (const InterfaceSelector& s : selectors) {
    if (SelectorMatches(s, i)) return true;
  }
  return false;
}

Status CheckSelectors(const std::vector<InterfaceSelector>& selectors,
                      const std::vector<NetInterface>& interfaces, const std::string& host) {
  for (const InterfaceSelector& s : selectors) {
    bool found = false;
    for (const NetInterface& i : interfaces) found = found || SelectorMatches(s, i);
    if (!found) {
      return InvalidArgument(
          (s.is_cidr ? "no address of " + host + " is in " + s.text
                     : host + " has no interface " + s.text + " with an IPv4 address") +
          " (it has: " + FormatInterfaces(interfaces) +
          "); pick one of those with --network-interface");
    }
  }
  return Status::OK();
}

const NetInterface* InterfaceWithAddress(const std::vector<NetInterface>& list,
                                         const std::string& address) {
  for (const NetInterface& i : list) {
    if (i.address == address) return &i;
  }
  return nullptr;
}

}  // namespace hvd::control
