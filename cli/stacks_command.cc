// `hvdrun stacks JOB [--rank N]...`: where a running job's ranks are. The launcher has each rank's
// agent signal the rank (a Python program using hvd.torch writes the stack of every thread to its
// stderr, a C++ one its main thread's native stack; docs/reliability.md, "Where a stalled rank
// is"); the stacks follow in the job's output
// (`hvdrun logs JOB`). An attached hvdrun does the same on SIGQUIT (Ctrl-\).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/client.h"
#include "cli/commands.h"
#include "control/job_model.h"

namespace hvd::cli {
namespace {

// "0,2,3" (from --rank given once or more) into ranks, each a number >= 0.
Status ParseRanks(const std::string& text, std::vector<int>* ranks) {
  size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    char* end = nullptr;
    const long r = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || r < 0 || r > (1 << 20)) {
      return InvalidArgument("--rank " + item + ": give a rank number (0, 1, ...)");
    }
    ranks->push_back(static_cast<int>(r));
    at = comma + 1;
  }
  return Status::OK();
}

}  // namespace

int StacksCommand(int argc, char** argv, int first) {
  control::FlagSet flags("hvdrun stacks");
  ClusterFlags cluster;
  std::string rank_list;
  bool help = false;
  cluster.Register(&flags);
  flags.StringList("--rank", &rank_list,
                   "only this rank (repeat, or N,M,...; default: every rank)");
  std::vector<std::string> args;
  if (int rc = ParseCommandFlags(&flags, &help, argc, argv, first, "[flags] JOB", 1, 1, &args);
      rc >= 0) {
    return rc;
  }
  std::vector<int> ranks;
  Status s = ParseRanks(rank_list, &ranks);
  if (!s.ok()) return ReportError(s);
  std::unique_ptr<Client> client;
  s = cluster.Connect(&client);
  if (!s.ok()) return ReportError(s);
  std::vector<int> asked;
  s = client->DumpStacks(args[0], ranks, "hvdrun stacks", &asked);
  if (!s.ok()) return ReportError(s, kExitError);
  if (asked.empty()) {
    std::fprintf(stderr, "hvdrun: job %s: none of %s runs now\n", args[0].c_str(),
                 ranks.empty() ? "its ranks" : control::RankList(ranks).c_str());
    return kExitError;
  }
  std::printf(
      "job %s: asked %s for %s stacks; a Python rank using hvd.torch writes them to its "
      "stderr (hvdrun logs %s)\n",
      args[0].c_str(), control::RankList(asked).c_str(), asked.size() == 1 ? "its" : "their",
      args[0].c_str());
  return kExitOk;
}

}  // namespace hvd::cli
