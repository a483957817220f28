#include "control/netif_proto.h"

namespace hvd::control {

void FromProto(const ProtoInterfaces& p, std::vector<NetInterface>* out) {
  out->clear();
  for (const v1::NetInterface& i : p) {
    out->push_back({i.name(), i.address(), i.prefix_len(), i.loopback(), i.up()});
  }
}

void ToProto(const std::vector<NetInterface>& list, ProtoInterfaces* p) {
  p->Clear();
  for (const NetInterface& i : list) {
    v1::NetInterface* q = p->Add();
    q->set_name(i.name);
    q->set_address(i.address);
    q->set_prefix_len(i.prefix_len);
    q->set_loopback(i.loopback);
    q->set_up(i.up);
  }
}

}  // namespace hvd::control
