#include "cli/torchrun_flags.h"

#include <cerrno>
#include <cstdlib>

namespace hvd::cli {
namespace {

bool ParseCount(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 1 || v > control::kMaxSlotsPerHost) return false;
  *out = v;
  return true;
}

}  // namespace

Status ApplyTorchrunShape(const TorchrunShape& shape, std::vector<control::HostSlots>* hosts,
                          int64_t* np, bool* np_given) {
  if (shape.nproc_per_node.empty() && shape.nnodes.empty()) return Status::OK();
  int64_t per_node = 0, nodes = 0;
  if (!shape.nproc_per_node.empty() && !ParseCount(shape.nproc_per_node, &per_node)) {
    return InvalidArgument(
        "--nproc-per-node " + shape.nproc_per_node +
        ": hvdrun needs the number of ranks per host (torchrun's auto, gpu and cpu are not "
        "known before the agents report; start hvd-agent with --slots -1 for one slot per GPU and "
        "give -H host:N)");
  }
  if (!shape.nnodes.empty() && !ParseCount(shape.nnodes, &nodes)) {
    return InvalidArgument(
        "--nnodes " + shape.nnodes +
        ": hvdrun runs a fixed number of hosts; pass --nnodes N (torchrun's elastic MIN:MAX is "
        "not supported; --max-restarts reruns a failed job)");
  }
  const int64_t named = static_cast<int64_t>(hosts->size());
  if (hosts->empty()) {
    if (nodes > 1) {
      return InvalidArgument("--nnodes " + shape.nnodes +
                             " needs the hosts: name them with -H host1,host2,... or --hostfile "
                             "(hvdrun starts --nproc-per-node ranks on each; no per-node command)");
    }
  } else if (nodes > 0 && nodes != named) {
    return InvalidArgument("--nnodes " + shape.nnodes + " but " + std::to_string(named) + " host" +
                           (named == 1 ? " is" : "s are") + " named (" +
                           control::FormatHostList(*hosts) +
                           "); name one host per node, or drop --nnodes");
  }
  if (per_node == 0) return Status::OK();  // --nnodes alone: checked, the hosts decide
  const int64_t total = per_node * std::max<int64_t>(1, named);
  if (*np_given && *np != total) {
    return InvalidArgument("-np " + std::to_string(*np) + " but --nproc-per-node " +
                           shape.nproc_per_node + " on " +
                           std::to_string(std::max<int64_t>(1, named)) + " host(s) makes " +
                           std::to_string(total) + " ranks; pass one or the other");
  }
  for (control::HostSlots& h : *hosts) h.slots = static_cast<int>(per_node);
  *np = total;
  *np_given = true;
  return Status::OK();
}

}  // namespace hvd::cli
