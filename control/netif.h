// Network interfaces as the control plane talks about them, and the user's way of naming them:
// `--network-interface eth1,ib0` or `--network-interface 10.0.0.0/8` (HVD_IFACE). Pure: the agent
// lists its interfaces (agent/interfaces.h) and everyone else reasons about those lists here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hvd/status.h"

namespace hvd::control {

// One IPv4 address of one interface (an interface with two addresses appears twice).
struct NetInterface {
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.2"
  int prefix_len = 0;   // 24
  bool loopback = false;
  bool up = false;  // IFF_UP and IFF_RUNNING
};

// "eth0 10.0.0.2/24" (", down" / ", loopback" appended when so).
std::string FormatInterface(const NetInterface& i);
// "eth0 10.0.0.2/24, decoy0 172.31.0.2/24"; "none" when empty.
std::string FormatInterfaces(const std::vector<NetInterface>& list);

// Dotted-quad IPv4 ("10.0.0.2") to a host-order integer. Exactly four decimal octets 0..255.
Status ParseIPv4(const std::string& text, uint32_t* out);
std::string FormatIPv4(uint32_t address);

// An IPv4 subnet. "10.0.0.0/8"; a bare address is a /32. Host bits may be set ("10.1.2.3/16"
// means 10.1.0.0/16), as in `ip addr` output.
struct Cidr {
  uint32_t network = 0;  // host order, host bits cleared
  int prefix_len = 32;
};
Status ParseCidr(const std::string& text, Cidr* out);
bool CidrContains(const Cidr& cidr, uint32_t address);
bool CidrContains(const Cidr& cidr, const std::string& address);  // false when not IPv4
std::string FormatCidr(const Cidr& cidr);

// One entry of --network-interface: an interface name or a subnet.
struct InterfaceSelector {
  std::string text;  // as the user wrote it
  bool is_cidr = false;
  Cidr cidr;  // when is_cidr
};

// "eth1,ib0", "10.0.0.0/8", "eth1,192.168.0.0/16" -> selectors in the given order (the order is
// the preference). Empty text -> no selectors (no restriction). Errors name the bad entry and say
// what is expected; duplicate entries are refused.
Status ParseInterfaceSelectors(const std::string& text, std::vector<InterfaceSelector>* out);
bool SelectorMatches(const InterfaceSelector& s, const NetInterface& i);
// Whether any selector matches (true when there are none).
bool AnySelectorMatches(const std::vector<InterfaceSelector>& selectors, const NetInterface& i);

// Checks `selectors` against one host's interfaces: every name must exist there and every subnet
// must hold one of its addresses. The error names the host, the entry and what the host has.
Status CheckSelectors(const std::vector<InterfaceSelector>& selectors,
                      const std::vector<NetInterface>& interfaces, const std::string& host);

// The interface holding `address` (first match), or null.
const NetInterface* InterfaceWithAddress(const std::vector<NetInterface>& list,
                                         const std::string& address);

}  // namespace hvd::control
