// hvdrun: what users type. Dispatches to run mode (the default) or a subcommand; each lives in
// its own *_command.cc in hvd_cli_lib.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/worker_wrapper.h"
#include "base/path_search.h"
#include "cli/commands.h"
#include "control/grpc_util.h"
#include "control/suggest.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int argc, char** argv, int first);
};

constexpr Command kCommands[] = {
    {"submit", hvd::cli::SubmitCommand}, {"status", hvd::cli::StatusCommand},
    {"list", hvd::cli::ListCommand},     {"cancel", hvd::cli::CancelCommand},
    {"logs", hvd::cli::LogsCommand},     {"agents", hvd::cli::AgentsCommand},
    {"stacks", hvd::cli::StacksCommand},
};

// The flags every command takes (ClusterFlags: where the launcher is and how to talk to it), so
// they may also come before the command, as in `hvdrun --launcher X --token-file T list`.
// Each takes a value, as the next argument or after '='.
constexpr const char* kGlobalFlags[] = {"--launcher", "--token-file", "--timeout", "--tls-ca",
                                        "--tls-cert", "--tls-key",    "--tls-crl"};

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

// Whether `name` (no '/') is an executable in $PATH, as a shell would find it.
bool InPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  for (const std::string& c : hvd::base::PathCandidates(name, path ? path : "/bin:/usr/bin")) {
    if (access(c.c_str(), X_OK) == 0) return true;
  }
  return false;
}

// `hvdrun stats` or `hvdrun jobs` (a word where run mode expects a flag): a mistyped subcommand,
// not a program, when it is within 2 edits of one or no program of that name exists. Returns the
// message, or "" to go on in run mode (which says "-np N is required" for `hvdrun ./train`).
std::string UnknownSubcommand(const std::string& word) {
  if (word.empty() || word[0] == '-' || word.find('/') != std::string::npos ||
      word.find('.') != std::string::npos) {  // a path, or a script such as ddp.py
    return "";
  }
  std::vector<std::string> names;
  std::string list;
  for (const Command& c : kCommands) {
    names.push_back(c.name);
    list += (list.empty() ? "" : ", ") + std::string(c.name);
  }
  // Other tools' words for ours (docker, kubectl, slurm), then spelling.
  static const char* const kSynonyms[][2] = {
      {"jobs", "list"},   {"ls", "list"},      {"ps", "list"},        {"squeue", "list"},
      {"kill", "cancel"}, {"stop", "cancel"},  {"scancel", "cancel"}, {"rm", "cancel"},
      {"log", "logs"},    {"nodes", "agents"}, {"hosts", "agents"},   {"stat", "status"},
      {"info", "status"}, {"show", "status"},  {"describe", "status"}};
  std::string near;
  for (const auto& s : kSynonyms) {
    if (word == s[0]) near = s[1];
  }
  if (near.empty()) near = hvd::control::NearestWord(word, names, 2);
  if (near.empty() && InPath(word)) return "";
  return "hvdrun: unknown subcommand '" + word + "'" +
         (near.empty() ? "" : "; did you mean '" + near + "'?") + " (subcommands: " + list +
         "; to run a program: hvdrun -np N PROGRAM [ARGS...])\n";
}

}  // namespace

int main(int argc, char** argv) {
  // A worker wrapper is this binary re-executed by the agent (embedded in hvdrun too).
  hvd::agent::RunWorkerWrapperIfAsked(argc, argv);
  hvd::control::RateLimitGrpcLogs();
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
      // --version and --check-build answer wherever they are, as in run mode; not in submit's
      // arguments, whose program may take them.
      for (int k = 1; k < argc && std::strcmp(c.name, "submit") != 0; ++k) {
        if (std::strcmp(argv[k], "--version") == 0) {
          std::fputs(hvd::cli::VersionText().c_str(), stdout);
          return 0;
        }
        if (std::strcmp(argv[k], "--check-build") == 0 || std::strcmp(argv[k], "-cb") == 0) {
          std::fputs(hvd::cli::CheckBuildText().c_str(), stdout);
          return 0;
        }
      }
      std::vector<char*> args = {argv[0], argv[i]};
      args.insert(args.end(), argv + 1, argv + i);
      args.insert(args.end(), argv + i + 1, argv + argc);
      args.push_back(nullptr);
      return c.main(argc, args.data(), 2);
    }
    // Not a subcommand; run mode unless it looks like a mistyped one (no run flag came first).
    const std::string unknown = UnknownSubcommand(argv[i]);
    if (!unknown.empty()) {
      std::fputs(unknown.c_str(), stderr);
      return hvd::cli::kExitUsage;
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
