// A view of some ranks of a transport as a transport of their own (a sub-communicator): rank i
// of the view is members[i] of the parent. Links, waits and Abort are the parent's, so every
// error still names the peers' ranks in the whole job. Collectives run on a view unchanged; the
// hierarchical allreduce runs on two (the ranks of this host, and this local rank's ranks on
// the other hosts).
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace hvd::runtime::transport {

// REQUIRES: `members` is sorted, holds parent->rank(), and `parent` outlives the view.
std::unique_ptr<Transport> NewGroupView(Transport* parent, std::vector<int> members);

}  // namespace hvd::runtime::transport
