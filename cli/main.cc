// hvdrun: what users type. Dispatches to run mode (the default) or a subcommand; each lives in
// its own *_command.cc in hvd_cli_lib.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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

// The flags every command takes (ClusterFlags: where the launcher is and how to talk to it), so
// they may also come before the command, as in `hvdrun --launcher X --token-file T list`.
// Each takes a value, as the next argument or after '='.
constexpr const char* kGlobalFlags[] = {"--launcher", "--token-file", "--timeout"};

// How many arguments from argv[i] form one global flag: 0 (not one), 1 ("--flag=value") or 2.
int GlobalFlagLength(int argc, char** argv, int i) {
  for (const char* flag : kGlobalFlags) {
    const size_t n = std::strlen(flag);
    if (std::strncmp(argv[i], flag, n) != 0) continue;
    if (argv[i][n] == '=') return 1;
    if (argv[i][n] == '\0') return i + 1 < argc ? 2 : 0;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A worker wrapper is this binary re-executed by the agent (embedded in hvdrun too).
  hvd::agent::RunWorkerWrapperIfAsked(argc, argv);
  // Global flags, then maybe a command: the command is run with the flags moved after its name
  // (its own parser takes them). Anything else is run mode, which takes them where they are.
  int i = 1;
  while (i < argc) {
    const int n = GlobalFlagLength(argc, argv, i);
    if (n == 0) break;
    i += n;
  }
  if (i < argc) {
    for (const Command& c : kCommands) {
      if (std::strcmp(argv[i], c.name) != 0) continue;
      std::vector<char*> args = {argv[0], argv[i]};
      args.insert(args.end(), argv + 1, argv + i);
      args.insert(args.end(), argv + i + 1, argv + argc);
      args.push_back(nullptr);
      return c.main(argc, args.data(), 2);
    }
  }
  if (argc >= 2) {
    const char* first = argv[1];
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
