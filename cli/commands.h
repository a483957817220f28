// hvdrun's subcommands, one file each, and what they share. Each takes main()'s argv and the
// index of its first own argument, and returns the process exit code.
#pragma once

#include <string>
#include <vector>

#include "control/flags.h"
#include "hvd/status.h"

namespace hvd::cli {

// Exit codes of hvdrun's own errors; a job's exit code passes through unchanged.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // the launcher, the network or the system failed
inline constexpr int kExitUsage = 2;  // bad flags or arguments: nothing was started

int RunCommand(int argc, char** argv, int first);     // run_command.cc (the default)
int SubmitCommand(int argc, char** argv, int first);  // submit_command.cc
int StatusCommand(int argc, char** argv, int first);  // status_command.cc
int ListCommand(int argc, char** argv, int first);    // list_command.cc
int CancelCommand(int argc, char** argv, int first);  // cancel_command.cc
int LogsCommand(int argc, char** argv, int first);    // logs_command.cc
int StacksCommand(int argc, char** argv, int first);  // stacks_command.cc
int AgentsCommand(int argc, char** argv, int first);  // list_command.cc

// What this build of hvd supports (`hvdrun --check-build`).
std::string CheckBuildText();
// "hvdrun <version>".
std::string VersionText();
// `hvdrun --help`: run mode's flags and the list of subcommands.
std::string MainUsage(const control::FlagSet& run_flags);

// Prints `s` on stderr as "hvdrun: <message>" (the message's own "hvdrun..." prefix is kept when
// it has one) and returns `code`.
int ReportError(const Status& s, int code);
// kExitUsage for InvalidArgument, kExitError otherwise.
int ReportError(const Status& s);

// Parses a subcommand's flags. Returns -1 to go on; otherwise the exit code: 0 after printing
// usage for --help, kExitUsage after a parse error or a wrong number of positional arguments
// (between min_args and max_args).
int ParseCommandFlags(control::FlagSet* flags, bool* help, int argc, char** argv, int first,
                      const std::string& synopsis, size_t min_args, size_t max_args,
                      std::vector<std::string>* positional);

}  // namespace hvd::cli
