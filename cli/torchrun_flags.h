// torchrun's job shape on hvdrun's command line: `--nproc-per-node N` (or --nproc_per_node) ranks
// on each of `--nnodes M` hosts become hvd's -np N*M, with N slots on each host -H/--hostfile
// names. Everything that would mean something else than under torchrun is refused, saying what to
// pass instead (docs/migrating.md, "Coming from torchrun").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/flags.h"
#include "control/host_spec.h"
#include "hvd/status.h"

namespace hvd::cli {

struct TorchrunShape {
  std::string nproc_per_node;  // --nproc-per-node as given; empty: not given
  std::string nnodes;          // --nnodes as given; empty: not given
  bool standalone = false;     // --standalone: one node
  bool cluster = false;        // a launcher places the ranks (--launcher, --ssh, submit)
};

// torchrun's rendezvous flags (--standalone, --rdzv-backend, --rdzv-endpoint, --rdzv-id,
// --rdzv-conf, --master-addr, --master-port, --node-rank, each also with '_' as torchrun spells
// them): --standalone is accepted (what hvdrun does anyway; TorchrunNotes says so), the others
// refused saying what hvdrun does instead. `standalone` receives --standalone.
void RegisterTorchrunFlags(control::FlagSet* flags, bool* standalone);

// The line hvdrun says before the job starts for an accepted torchrun flag (--standalone).
std::vector<std::string> TorchrunNotes(const control::FlagSet& flags, bool standalone);

// Applies the shape to the parsed hosts and -np (`np_given`: whether -np was given):
//  - without hosts, --nnodes must be 1 and every rank runs on this host; in cluster mode the
//    hosts must be named (-H a or --hostfile), since a launcher would spread -np ranks over any
//    agents, not N on one node;
//  - --standalone is one node: with --nnodes above 1 or several hosts it is a contradiction, and
//    in cluster mode it needs that node named;
//  - with hosts, --nnodes must equal their number, and with --nproc-per-node N each host gets
//    exactly N slots (torchrun runs N on every node; the hosts' own slot counts are replaced);
//  - -np, when also given, must equal N*M.
// On success *np is N*M and *np_given true when --nproc-per-node was given; untouched otherwise.
Status ApplyTorchrunShape(const TorchrunShape& shape, std::vector<control::HostSlots>* hosts,
                          int64_t* np, bool* np_given);

}  // namespace hvd::cli
