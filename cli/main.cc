// hvdrun: what users type. Dispatches to run mode (the default) or a subcommand; each lives in
// its own *_command.cc in hvd_cli_lib.
#include <cstdio>
#include <cstring>

#include "agent/worker_wrapper.h"
#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int argc, char** argv, int first);
};

constexpr Command kCommands[] = {
    {"submit", hvd::cli::SubmitCommand}, {"status", hvd::cli::StatusCommand},
    {"list", hvd::cli::ListCommand},     {"cancel", hvd::cli::CancelCommand},
    {"logs", hvd::cli::LogsCommand},     {"agents", hvd::cli::AgentsCommand},
};

}  // namespace

int main(int argc, char** argv) {
  // A worker wrapper is this binary re-executed by the agent (embedded in hvdrun too).
  hvd::agent::RunWorkerWrapperIfAsked(argc, argv);
  if (argc >= 2) {
    const char* first = argv[1];
    for (const Command& c : kCommands) {
      if (std::strcmp(first, c.name) == 0) return c.main(argc, argv, 2);
    }
    if (std::strcmp(first, "--version") == 0) {
      std::fputs(hvd::cli::VersionText().c_str(), stdout);
      return 0;
    }
    if (std::strcmp(first, "--check-build") == 0) {
      std::fputs(hvd::cli::CheckBuildText().c_str(), stdout);
      return 0;
    }
  }
  if (argc < 2) {
    std::fputs(
        "hvdrun: nothing to run; usage: hvdrun [flags] -np N PROGRAM [ARGS...], or "
        "hvdrun --help\n",
        stderr);
    return hvd::cli::kExitUsage;
  }
  return hvd::cli::RunCommand(argc, argv, 1);
}
