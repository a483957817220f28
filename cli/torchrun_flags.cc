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

constexpr const char* kGroup =
    "torchrun compatibility (docs/migrating.md, \"Coming from torchrun\")";

constexpr const char* kRendezvous =
    "not needed: hvdrun's launcher places the ranks and rank 0's agent chooses MASTER_ADDR and "
    "MASTER_PORT before any rank starts; instead, drop it (a job that must meet elsewhere passes "
    "-x MASTER_ADDR=HOST -x MASTER_PORT=N, which win)";
constexpr const char* kOutputFiles =
    "hvdrun shows every rank's output, tagged; instead, --output-filename DIR also writes it to "
    "files";
constexpr const char* kNodeRank =
    "not needed: hvdrun runs once for all the nodes and numbers them itself (GROUP_RANK); "
    "instead, run it once with --nnodes N -H node1,node2,... (docs/deployment.md)";

}  // namespace

void RegisterTorchrunFlags(control::FlagSet* flags, bool* standalone) {
  flags->Group(kGroup);
  flags->Bool("--standalone", standalone,
              "accepted: one node with a rendezvous of its own, which is what hvdrun does "
              "without -H");
  flags->Refused("--rdzv-backend,--rdzv_backend", "BACKEND", kRendezvous);
  flags->Refused("--rdzv-endpoint,--rdzv_endpoint", "HOST:PORT", kRendezvous);
  flags->Refused("--rdzv-id,--rdzv_id", "ID", kRendezvous);
  flags->Refused("--rdzv-conf,--rdzv_conf", "CONF", kRendezvous);
  flags->Refused("--master-addr,--master_addr", "HOST", kRendezvous);
  flags->Refused("--master-port,--master_port", "PORT", kRendezvous);
  flags->Refused("--node-rank,--node_rank", "N", kNodeRank);
  // The rest of torchrun's flags (torch 1.13 spells them with '_', later ones with '-' too):
  // each says what hvdrun does instead, not "unknown flag" or the nearest unrelated name.
  flags->Refused("--module,-m", "",
                 "hvdrun runs programs, not Python modules; name the interpreter instead: "
                 "hvdrun ... python3 -m MODULE");
  flags->Refused("--no-python,--no_python", "",
                 "not needed: hvdrun runs the program itself, never through python; drop it");
  flags->Refused("--monitor-interval,--monitor_interval", "SECONDS",
                 "not needed: each hvd-agent sees its ranks end at once (it is their parent); "
                 "drop it");
  flags->Refused("--start-method,--start_method", "METHOD",
                 "not needed: every rank is a program hvdrun's agent starts (fork and exec); "
                 "drop it");
  flags->Refused("--log-dir,--log_dir", "DIR",
                 "instead, --output-filename DIR writes each rank's stdout and stderr under DIR");
  flags->Refused("--redirects,-r", "STREAMS", kOutputFiles);
  flags->Refused("--tee,-t", "STREAMS", kOutputFiles);
  flags->Refused("--local-addr,--local_addr", "ADDR",
                 "instead, --network-interface NAME or CIDR picks the network ranks use");
  flags->Refused("--role", "ROLE", "hvdrun's ranks have no role names; drop it");
  flags->Group("");
}

std::vector<std::string> TorchrunNotes(const control::FlagSet& flags, bool standalone) {
  if (!flags.Given("--standalone") || !standalone) return {};
  return {flags.GivenAs("--standalone") +
          ": accepted; hvdrun runs the job on one node with a rendezvous of its own (a free "
          "MASTER_PORT chosen by the agent), as torchrun --standalone does"};
}

Status ApplyTorchrunShape(const TorchrunShape& shape, std::vector<control::HostSlots>* hosts,
                          int64_t* np, bool* np_given) {
  if (shape.standalone && (hosts->size() > 1 || (!shape.nnodes.empty() && shape.nnodes != "1"))) {
    return InvalidArgument("--standalone runs one node, but " +
                           (hosts->size() > 1 ? std::to_string(hosts->size()) + " hosts are named"
                                              : "--nnodes is " + shape.nnodes) +
                           "; drop --standalone for a job over several nodes");
  }
  if (shape.standalone && shape.cluster && hosts->empty()) {
    return InvalidArgument(
        "--standalone in cluster mode needs its node named with -H HOST or --hostfile: without "
        "it the launcher would spread the ranks over any agents");
  }
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
  if (shape.cluster && hosts->empty()) {
    const std::string given = !shape.nproc_per_node.empty()
                                  ? "--nproc-per-node " + shape.nproc_per_node
                                  : "--nnodes " + shape.nnodes;
    return InvalidArgument(
        given +
        " in cluster mode needs the hosts named with -H host1,host2,... or --hostfile: without "
        "them the launcher would spread the ranks over any agents, not the same number on each "
        "node (for that, pass -np N alone)");
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
