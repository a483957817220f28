// control::NetInterface <-> hvd.v1.NetInterface, shared by the agent (which reports them) and the
// launcher (which keeps and serves them).
#pragma once

#include <google/protobuf/repeated_field.h>

#include <vector>

#include "control/netif.h"
#include "hvd/v1/network.pb.h"

namespace hvd::control {

using ProtoInterfaces = google::protobuf::RepeatedPtrField<v1::NetInterface>;

void FromProto(const ProtoInterfaces& p, std::vector<NetInterface>* out);
void ToProto(const std::vector<NetInterface>& list, ProtoInterfaces* p);

}  // namespace hvd::control
