// This host's network interfaces as the agent reports them at registration, and the address it
// advertises. The launcher picks a job's network from these lists and a probe between the hosts
// (launcherd/network_check.h); the choice of the advertised address is pure and tested apart.
#pragma once

#include <string>
#include <vector>

#include "control/netif.h"
#include "hvd/status.h"
#include "hvd/v1/launcher.pb.h"

namespace hvd::agent {

// Every IPv4 address of every interface (getifaddrs), in the kernel's order. Errors name the call.
Status ListInterfaces(std::vector<control::NetInterface>* out);

// The address to advertise and the interface it is on.
struct AdvertiseChoice {
  std::string address;
  std::string iface;  // "" when the address is on no listed interface (given by hand, NAT)
  std::string note;   // why it is not simply the route towards the launcher, for the log
};

// `given`: --advertise-addr, used as is. Otherwise `towards_launcher` (the local address of the
// route to the launcher, LocalAddressTowards): that is the network the launcher shares with this
// host, never a per-host bridge such as docker0 unless the launcher is only reachable through it.
// With `selectors` (--network-interface) that address must be on a selected interface; if it is
// not, the first up interface the selectors pick, in their order, is advertised instead.
// InvalidArgument when the selectors pick nothing here; Unavailable when there is no route and
// nothing else to advertise.
Status ChooseAdvertiseAddress(const std::string& given, const std::string& towards_launcher,
                              const std::vector<control::NetInterface>& interfaces,
                              const std::vector<control::InterfaceSelector>& selectors,
                              AdvertiseChoice* out);

// Parses --network-interface and checks it against this host's interfaces (at start, so a typo
// stops the agent with a message naming what the host has).
Status ParseAgentSelectors(const std::string& text, const std::string& host,
                           std::vector<control::InterfaceSelector>* out);

// Fills the network part of this host's registration: its interfaces, the advertised address
// (ChooseAdvertiseAddress towards `launcher`) and the interface holding it. Never fails: what
// cannot be told is logged and the host name is advertised, as a last resort.
void DescribeHostNetwork(const std::string& launcher, const std::string& advertise_addr,
                         const std::vector<control::InterfaceSelector>& selectors,
                         const std::string& host, v1::AgentInfo* info);

}  // namespace hvd::agent
