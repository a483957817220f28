// torchrun's job shape on hvdrun's command line: `--nproc-per-node N` (or --nproc_per_node) ranks
// on each of `--nnodes M` hosts become hvd's -np N*M, with N slots on each host -H/--hostfile
// names. Everything that would mean something else than under torchrun is refused, saying what to
// pass instead (docs/deployment.md, "Coming from torchrun").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "control/host_spec.h"
#include "hvd/status.h"

namespace hvd::cli {

struct TorchrunShape {
  std::string nproc_per_node;  // --nproc-per-node as given; empty: not given
  std::string nnodes;          // --nnodes as given; empty: not given
};

// Applies the shape to the parsed hosts and -np (`np_given`: whether -np was given):
//  - without hosts, --nnodes must be 1: every rank runs on one host (or where a cluster places
//    them), so more nodes need their names (-H a,b or --hostfile);
//  - with hosts, --nnodes must equal their number, and with --nproc-per-node N each host gets
//    exactly N slots (torchrun runs N on every node; the hosts' own slot counts are replaced);
//  - -np, when also given, must equal N*M.
// On success *np is N*M and *np_given true when --nproc-per-node was given; untouched otherwise.
Status ApplyTorchrunShape(const TorchrunShape& shape, std::vector<control::HostSlots>* hosts,
                          int64_t* np, bool* np_given);

}  // namespace hvd::cli
