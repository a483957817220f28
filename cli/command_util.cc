// What every subcommand shares: error reporting with hvdrun's exit codes, flag parsing with
// --help, and the build/version text. (--json goes through control/status_json.h, REST's shape.)
#include <cstdio>

#include "cli/commands.h"
#include "cli/embedded.h"
#include "cli/ssh_session.h"

#ifndef HVD_VERSION
#define HVD_VERSION "dev"
#endif

namespace hvd::cli {

int ReportError(const Status& s, int code) {
  const std::string& m = s.message();
  const bool prefixed = m.rfind("hvdrun", 0) == 0;
  std::fprintf(stderr, "%s%s\n", prefixed ? "" : "hvdrun: ", m.c_str());
  std::fflush(stderr);
  return code;
}

int ReportError(const Status& s) {
  return ReportError(s, s.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError);
}

int ParseCommandFlags(control::FlagSet* flags, bool* help, int argc, char** argv, int first,
                      const std::string& synopsis, size_t min_args, size_t max_args,
                      std::vector<std::string>* positional) {
  flags->Bool("--help,-h", help, "show this help");
  Status s = flags->Parse(argc, argv, first, /*stop_at_positional=*/false, positional);
  if (!s.ok()) return ReportError(s, kExitUsage);
  if (*help) {
    std::fputs(flags->Usage(synopsis).c_str(), stdout);
    return kExitOk;
  }
  if (positional->size() < min_args || positional->size() > max_args) {
    std::string msg = std::string(argv[first - 1]) + ": ";
    msg += positional->size() < min_args ? "missing argument"
                                         : "unexpected argument '" + positional->back() + "'";
    return ReportError(InvalidArgument(msg + "; usage: hvdrun " + argv[first - 1] + " " + synopsis),
                       kExitUsage);
  }
  return -1;
}

std::string VersionText() {
  return std::string("hvdrun ") + HVD_VERSION + "\n";
}

std::string CheckBuildText() {
  // Kept honest by the build: TCP and shared memory are always there (runtime/transport/tcp,
  // shm); CUDA and NCCL where the CUDA plugin (runtime/gpu/cuda, libhvd_cuda.so) was built, as
  // hvd.torch.cuda_built() says. Update these lines with the features, not before.
#ifdef HVD_CLI_CUDA_BUILT
  const char* gpu = "X";
#else
  const char* gpu = " ";
#endif
  std::string out = VersionText();
  out += "Available transports:\n";
  out += "    [X] TCP\n";
  out += "    [X] Shared memory (between the ranks of one host)\n";
  out += std::string("    [") + gpu +
         "] NCCL (for CUDA tensors, through libhvd_cuda.so; NCCL itself is loaded when a rank "
         "first needs it)\n";
  out += "Available features:\n";
  out += std::string("    [") + gpu +
         "] CUDA (CUDA tensors through the CUDA plugin, libhvd_cuda.so, beside libhvd.so; ranks "
         "see their host's GPUs, or their slot's alone with --gpu-isolation)\n";
  out += std::string("    [") + (HaveSshBootstrap() ? "X" : " ") +
         "] SSH bootstrap (hvdrun --ssh starts hvd-agent on hosts without one)\n";
  out += "    [ ] MPI\n";
  out += std::string("    [") + (HaveEmbeddedCluster() ? "X" : " ") +
         "] Local mode (embedded launcher and agent)\n";
  out += "    [X] Cluster mode (--launcher HOST:PORT)\n";
  return out;
}

std::string MainUsage(const control::FlagSet& run_flags) {
  std::string out = run_flags.Usage("[flags] -np N PROGRAM [ARGS...]");
  out +=
      "\nWithout --launcher (or HVD_LAUNCHER) the ranks run on this host under an embedded "
      "launcher;\nwith it, on the cluster that launcher manages.\n\n"
      "commands:\n"
      "  hvdrun submit [flags] -np N PROGRAM [ARGS...]   start a job detached; prints its id\n"
      "  hvdrun status [JOB]                             a job's state and ranks, or the "
      "cluster's\n"
      "  hvdrun list                                     every job\n"
      "  hvdrun cancel JOB                               end a job and its ranks\n"
      "  hvdrun logs JOB [-f]                            a job's output (-f: follow)\n"
      "  hvdrun stacks JOB [--rank N]                    where its ranks are: their stacks, in "
      "its output\n"
      "  hvdrun agents                                   the agents and their slots\n"
      "  hvdrun --version | --check-build\n"
      "Each command takes --help. --launcher, --token-file and --timeout may also come before "
      "the command\n(hvdrun --launcher HOST:PORT --token-file FILE list). An attached hvdrun "
      "shows its ranks'\nstacks on SIGQUIT (Ctrl-\\).\n";
  return out;
}

}  // namespace hvd::cli
