#include "agent/interfaces.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "agent/host_info.h"
#include "base/logging.h"
#include "control/netif_proto.h"

namespace hvd::agent {

Status ListInterfaces(std::vector<control::NetInterface>* out) {
  out->clear();
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Unavailable(std::string("getifaddrs: ") + std::strerror(errno));
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    control::NetInterface i;
    i.name = a->ifa_name;
    const in_addr addr = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
    i.address = control::FormatIPv4(ntohl(addr.s_addr));
    if (a->ifa_netmask != nullptr) {
      const uint32_t mask =
          ntohl(reinterpret_cast<const sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
      i.prefix_len = __builtin_popcount(mask);
    }
    i.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    i.up = (a->ifa_flags & IFF_UP) != 0 && (a->ifa_flags & IFF_RUNNING) != 0;
    out->push_back(std::move(i));
  }
  freeifaddrs(list);
  return Status::OK();
}

Status ChooseAdvertiseAddress(const std::string& given, const std::string& towards_launcher,
                              const std::vector<control::NetInterface>& interfaces,
                              const std::vector<control::InterfaceSelector>& selectors,
                              AdvertiseChoice* out) {
  *out = AdvertiseChoice();
  if (!given.empty()) {
    out->address = given;
    if (const control::NetInterface* i = control::InterfaceWithAddress(interfaces, given)) {
      out->iface = i->name;
    }
    return Status::OK();
  }
  const control::NetInterface* route = control::InterfaceWithAddress(interfaces, towards_launcher);
  if (selectors.empty() || (route != nullptr && control::AnySelectorMatches(selectors, *route))) {
    if (towards_launcher.empty()) {
      return Unavailable("no route to the launcher and no --advertise-addr");
    }
    out->address = towards_launcher;
    out->iface = route != nullptr ? route->name : "";
    return Status::OK();
  }
  // The selectors' order is the user's preference.
  for (const control::InterfaceSelector& s : selectors) {
    for (const control::NetInterface& i : interfaces) {
      if (!i.up || !control::SelectorMatches(s, i)) continue;
      out->address = i.address;
      out->iface = i.name;
      out->note = "advertising " + i.address + " on " + i.name + " (--network-interface " + s.text +
                  ")" +
                  (towards_launcher.empty()
                       ? ""
                       : "; the launcher is reached from " + towards_launcher + ", not selected");
      return Status::OK();
    }
  }
  std::string text;
  for (const control::InterfaceSelector& s : selectors) text += (text.empty() ? "" : ",") + s.text;
  return InvalidArgument("--network-interface " + text +
                         " selects no interface that is up on this host (it has: " +
                         control::FormatInterfaces(interfaces) + ")");
}

Status ParseAgentSelectors(const std::string& text, const std::string& host,
                           std::vector<control::InterfaceSelector>* out) {
  HVD_RETURN_IF_ERROR_CTX(control::ParseInterfaceSelectors(text, out), "--network-interface");
  if (out->empty()) return Status::OK();
  std::vector<control::NetInterface> interfaces;
  HVD_RETURN_IF_ERROR(ListInterfaces(&interfaces));
  return control::CheckSelectors(*out, interfaces, host).WithContext("--network-interface");
}

void DescribeHostNetwork(const std::string& launcher, const std::string& advertise_addr,
                         const std::vector<control::InterfaceSelector>& selectors,
                         const std::string& host, v1::AgentInfo* info) {
  std::vector<control::NetInterface> interfaces;
  Status s = ListInterfaces(&interfaces);
  if (!s.ok()) {
    HVD_LOG(WARNING) << "cannot list this host's interfaces: " << s.message();
  }
  std::string route;
  Status route_status =
      advertise_addr.empty() ? LocalAddressTowards(launcher, &route) : Status::OK();
  AdvertiseChoice choice;
  s = ChooseAdvertiseAddress(advertise_addr, route, interfaces, selectors, &choice);
  if (!s.ok()) {
    choice.address = host;
    HVD_LOG(WARNING) << "cannot tell this host's address ("
                     << (route_status.ok() ? s.message() : route_status.message())
                     << "); advertising '" << host << "' (set --advertise-addr)";
  } else if (!choice.note.empty()) {
    HVD_LOG(INFO) << choice.note;
  }
  info->set_advertise_addr(choice.address);
  info->set_advertise_iface(choice.iface);
  control::ToProto(interfaces, info->mutable_interfaces());
}

}  // namespace hvd::agent
