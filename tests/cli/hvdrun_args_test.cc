// The built hvdrun's command line: every mistake is refused before anything starts, with exit
// code 2 and a message that names the bad piece; --help, --version and --check-build answer.
// Each test also checks that hvdrun left no process behind.
#include <gtest/gtest.h>

#include <sstream>

#include "testutil/expect.h"

#include "hvdrun_process.h"

#ifndef HVDRUN_PATH
#error "HVDRUN_PATH must name the built hvdrun (tests/CMakeLists.txt)"
#endif

namespace hvd::clitest {
namespace {

class HvdrunArgs : public ::testing::Test {
 protected:
  ProcResult Hvdrun(std::vector<std::string> args, const std::vector<std::string>& env = {}) {
    args.insert(args.begin(), HVDRUN_PATH);
    // No cluster from the environment: these test the local command line.
    std::vector<std::string> e = {"HVD_LAUNCHER=", "HVD_TOKEN_FILE="};
    e.insert(e.end(), env.begin(), env.end());
    return RunProcess(args, dir_.path(), std::chrono::seconds(30), e, dir_.path());
  }
  // A usage error: exit 2, one "hvdrun: " message naming `needle`, nothing on stdout.
  void ExpectUsageError(const std::vector<std::string>& args, const std::string& needle,
                        const std::vector<std::string>& env = {}) {
    ProcResult r = Hvdrun(args, env);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.err.rfind("hvdrun", 0), 0u) << r.err;
    EXPECT_HAS(r.err, needle);
    EXPECT_EQ(r.out, "");
  }
  void TearDown() override { EXPECT_EQ(Leftovers(), std::vector<std::string>{}); }

  TempDir dir_;
};

// The leftover check the other tests rely on does see a process that outlives its parent.
TEST_F(HvdrunArgs, HarnessCatchesSurvivors) {
  ProcResult r = RunProcess({"/bin/sh", "-c", "sleep 60 & echo $!"}, dir_.path());
  EXPECT_EQ(r.exit_code, 0);
  const pid_t orphan = std::atoi(r.out.c_str());
  ASSERT_GT(orphan, 0);
  EXPECT_TRUE(ProcessAlive(orphan));
  const std::vector<std::string> left = Leftovers(std::chrono::milliseconds(100));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(std::atoi(left[0].c_str()), orphan);
  EXPECT_HAS(left[0], "(sleep)");
  EXPECT_FALSE(ProcessAlive(orphan));
}

TEST_F(HvdrunArgs, NoArguments) {
  ExpectUsageError({}, "usage: hvdrun");
}

TEST_F(HvdrunArgs, UnknownFlag) {
  ExpectUsageError({"--np-typo", "2", "/bin/true"}, "unknown flag --np-typo");
  ExpectUsageError({"status", "--bogus"}, "hvdrun status: unknown flag --bogus");
}

TEST_F(HvdrunArgs, FlagWithoutValue) {
  ExpectUsageError({"-np"}, "flag -np needs a value");
}

TEST_F(HvdrunArgs, BadNp) {
  ExpectUsageError({"-np", "two", "/bin/true"}, "'two' is not an integer");
  ExpectUsageError({"-np", "0", "/bin/true"}, "-np must be at least 1, not 0");
  // It said "-np must be at least 1, not 99999999999".
  ExpectUsageError({"-np", "99999999999", "/bin/true"},
                   "-np 99999999999 is more than hvd's limit of 1048576 ranks in a job");
  ExpectUsageError({"/bin/true"}, "-np N is required");
}

TEST_F(HvdrunArgs, BadHosts) {
  ExpectUsageError({"-np", "2", "-H", "a:0", "/bin/true"}, "slots of host 'a' must be at least 1");
  ExpectUsageError({"-np", "2", "-H", "a:2,a:2", "/bin/true"}, "listed twice");
  ExpectUsageError({"-np", "2", "-H", "a:x", "/bin/true"}, "HOST[:SLOTS]");
  ExpectUsageError({"-np", "8", "-H", "localhost:4", "/bin/true"},
                   "-np 8 needs 8 slots but the hosts offer 4 (localhost:4)");
  ExpectUsageError({"-np", "2", "-H", "other-host:2", "/bin/true"},
                   "-H names other-host, but without --launcher");
  ExpectUsageError({"-np", "2", "-H", "localhost:2", "--hostfile", "x", "/bin/true"},
                   "pass only one of them");
}

TEST_F(HvdrunArgs, BadHostfile) {
  ExpectUsageError({"-np", "1", "--hostfile", dir_ / "missing", "/bin/true"},
                   "--hostfile " + (dir_ / "missing") + ": No such file or directory");
  WriteFile(dir_ / "hosts", "localhost slots=2\nbad slots=two\n");
  ExpectUsageError({"-np", "1", "--hostfile", dir_ / "hosts", "/bin/true"},
                   "line 2 'bad slots=two'");
}

TEST_F(HvdrunArgs, EnvOfUnsetVariable) {
  ExpectUsageError({"-np", "1", "-x", "HVDRUN_TEST_UNSET", "/bin/true"},
                   "-x HVDRUN_TEST_UNSET: HVDRUN_TEST_UNSET is not set in hvdrun's environment",
                   {"HVDRUN_TEST_UNSET="});
  ExpectUsageError({"-np", "1", "-x", "1BAD=2", "/bin/true"}, "'1BAD' is not a variable name");
  ExpectUsageError({"-np", "1", "-x", "HVD_RANK=3", "/bin/true"},
                   "HVD_RANK is set by the launcher");
  ExpectUsageError({"-np", "1", "-x", "HVD_CYCLE_TIME=2", "--cycle-time-ms", "3", "/bin/true"},
                   "--cycle-time-ms and -x HVD_CYCLE_TIME both set HVD_CYCLE_TIME");
}

TEST_F(HvdrunArgs, BadKnobs) {
  ExpectUsageError({"-np", "1", "--fusion-threshold-mb", "-1", "/bin/true"},
                   "--fusion-threshold-mb must be between 0");
  ExpectUsageError({"-np", "1", "--cycle-time-ms", "0", "/bin/true"}, "--cycle-time-ms must be");
  ExpectUsageError(
      {"-np", "1", "--start-timeout", "-1", "/bin/true"},
      "--start-timeout must be a number of seconds >= 0 and at most 2592000 (30 days), not -1");
  // The bound is in the message (and what the user typed, not only the flag's long name).
  ExpectUsageError({"-np", "1", "--cycle-time-ms", "70000", "/bin/true"},
                   "--cycle-time-ms must be a number of milliseconds above 0 and at most 60000, "
                   "not 70000");
  ExpectUsageError({"-np", "1", "--cache-capacity", "1048577", "/bin/true"},
                   "--cache-capacity must be between 0 (no cache) and 1048576 entries");
  ExpectUsageError({"-np", "1", "--kill-grace", "nan", "/bin/true"}, "--kill-grace");
  ExpectUsageError({"-np", "1", "--max-restarts", "-2", "/bin/true"},
                   "--max-restarts must be between 0 and 1000, not -2");
}

TEST_F(HvdrunArgs, MissingProgram) {
  ExpectUsageError({"-np", "2", "./trian"}, "hvdrun: ./trian: No such file or directory");
  ExpectUsageError({"-np", "2", "no-such-command-hvd"}, "no-such-command-hvd: command not found");
  ExpectUsageError({"-np", "2"}, "no program to run");
  ExpectUsageError({"-np", "2", "/tmp"}, "/tmp: Is a directory");
  WriteFile(dir_ / "notexec", "#!/bin/sh\n", 0644);
  ExpectUsageError({"-np", "2", "./notexec"}, "./notexec: Permission denied");
  ExpectUsageError({"-np", "1", "--working-dir", dir_ / "nope", "/bin/true"},
                   "--working-dir " + (dir_ / "nope") + ": No such file or directory");
}

TEST_F(HvdrunArgs, BadOutputDirectory) {
  WriteFile(dir_ / "file", "x");
  ExpectUsageError({"-np", "1", "--output-filename", dir_ / "file", "/bin/true"},
                   "--output-filename: " + (dir_ / "file") + " exists and is not a directory");
}

TEST_F(HvdrunArgs, ClusterFlagsNeedTheirParts) {
  ExpectUsageError({"-np", "1", "--launcher", "nohostport", "/bin/true"},
                   "--launcher: 'nohostport' is not HOST:PORT");
  ExpectUsageError({"-np", "1", "--launcher", "127.0.0.1:1", "/bin/true"},
                   "pass --token-file FILE (or set HVD_TOKEN_FILE)");
  ExpectUsageError({"list"}, "no launcher: pass --launcher HOST:PORT");
  ExpectUsageError({"submit", "-np", "1", "/bin/true"}, "submit needs a cluster");
  ExpectUsageError({"cancel"}, "cancel: missing argument");
  ExpectUsageError({"logs", "a", "b"}, "logs: unexpected argument 'b'");
  WriteFile(dir_ / "token", "secret\n", 0644);
  ExpectUsageError({"list", "--launcher", "127.0.0.1:1", "--token-file", dir_ / "token"},
                   "chmod 600");
}

TEST_F(HvdrunArgs, UnreachableLauncherIsNamed) {
  WriteFile(dir_ / "token", "secret\n", 0600);
  ProcResult r = Hvdrun({"list", "--launcher", "127.0.0.1:1", "--token-file", dir_ / "token"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "hvdrun: launcher at 127.0.0.1:1: ListJobs");
  r = Hvdrun({"-np", "1", "/bin/true"},
             {"HVD_LAUNCHER=127.0.0.1:1", "HVD_TOKEN_FILE=" + (dir_ / "token")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_HAS(r.err, "launcher at 127.0.0.1:1: SubmitJob");
  EXPECT_LT(r.seconds, 20);
}

TEST_F(HvdrunArgs, Help) {
  ProcResult r = Hvdrun({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"-np", "--hosts, -H", "--hostfile", "-x", "--output-filename", "--fusion-threshold-mb",
        "--cycle-time-ms", "--timeline-filename", "--start-timeout", "--stall-timeout",
        "--stall-check-time", "--kill-grace", "--max-restarts", "--launcher", "--token-file",
        "--verbose", "hvdrun submit", "hvdrun logs JOB [-f]", "--check-build"}) {
    EXPECT_HAS(r.out, flag);
  }
  for (const char* cmd : {"submit", "status", "list", "cancel", "logs", "agents"}) {
    r = Hvdrun({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_HAS(r.out, std::string("usage: hvdrun ") + cmd);
    EXPECT_HAS(r.out, "--launcher");
  }
}

TEST_F(HvdrunArgs, VersionAndCheckBuild) {
  ProcResult r = Hvdrun({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("hvdrun ", 0), 0u) << r.out;
  r = Hvdrun({"--check-build"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_HAS(r.out, "[X] TCP");
  EXPECT_HAS(r.out, "[X] Shared memory");  // runtime/transport/shm
  // CUDA and NCCL as the build made the CUDA plugin (its target), the answer
  // hvd.torch.cuda_built() gives.
#ifdef HVD_TEST_CUDA_BUILT
  const std::string mark = "[X]";
#else
  const std::string mark = "[ ]";
#endif
  EXPECT_HAS(r.out, mark + " NCCL (for CUDA tensors, through libhvd_cuda.so");
  EXPECT_HAS(r.out, mark + " CUDA (CUDA tensors through the CUDA plugin");
  EXPECT_HAS(r.out, "] SSH bootstrap (hvdrun --ssh");
  // Wherever they are, subcommands included (list, status: "unknown flag --version", exit 2).
  for (const char* command : {"list", "status", "logs", "cancel", "agents"}) {
    r = Hvdrun({command, "--version"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_EQ(r.out.rfind("hvdrun ", 0), 0u) << command << ": " << r.out;
  }
  r = Hvdrun({"status", "-cb"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[X] TCP");
}

// horovodrun's command line (tests/cli/horovodrun_flags.txt, every option of horovodrun 0.28):
// each name is accepted (hvdrun gets as far as the missing program, or answers and exits 0) or
// refused with a message that says what to use instead; never an unknown flag.
TEST_F(HvdrunArgs, EveryHorovodrunFlagIsAcceptedOrRefusedWithWhatInstead) {
  WriteFile(dir_ / "horovod.yaml", "params:\n  cache_capacity: 64\nlogging:\n  level: INFO\n");
  WriteFile(dir_ / "hostfile", "localhost slots=2\n");
  WriteFile(dir_ / "id_key", "key\n", 0600);
  WriteFile(dir_ / "discover.sh", "#!/bin/sh\necho localhost:2\n", 0755);
  const std::string help = Hvdrun({"--help"}).out;
  std::istringstream list(ReadAll(std::string(HVD_SOURCE_DIR) + "/tests/cli/horovodrun_flags.txt"));
  int checked = 0;
  for (std::string line; std::getline(list, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t bar = line.find('|');
    ASSERT_NE(bar, std::string::npos) << line;
    std::vector<std::string> names, extra;
    std::istringstream n(line.substr(0, bar)), x(line.substr(bar + 1));
    for (std::string w; n >> w;) names.push_back(w);
    for (std::string w; x >> w;) {
      for (size_t at; (at = w.find("{dir}")) != std::string::npos;) w.replace(at, 5, dir_.path());
      extra.push_back(w);
    }
    for (const std::string& name : names) {
      // A real program: an accepted flag runs the job (one rank of /bin/true), so the checks
      // after the flags' own (--ssh's, the binding's...) judge it too.
      std::vector<std::string> args = {"-np", "1", name};
      args.insert(args.end(), extra.begin(), extra.end());
      args.push_back("/bin/true");
      ProcResult r = Hvdrun(args);
      SCOPED_TRACE(name + ": exit " + std::to_string(r.exit_code) + ", stderr: " + r.err);
      EXPECT_EQ(r.err.find("unknown flag"), std::string::npos);
      if (r.exit_code == 0) {
        if (r.out.empty()) {       // accepted: the job ran
          EXPECT_HAS(help, name);  // and --help lists it
        }                          // else --help, --version, --check-build answered
      } else if (r.err.find("hvdrun: " + name + " needs --ssh: add --ssh") != std::string::npos) {
        EXPECT_EQ(r.exit_code, 2);  // horovodrun's -p, -i: SSH's, named as typed, with what to do
        EXPECT_HAS(help, name);
      } else {
        EXPECT_EQ(r.exit_code, 2);
        EXPECT_HAS(r.err, "hvdrun: " + name + ": ");
        EXPECT_HAS(r.err, "; instead, ");
        EXPECT_HAS(help, name);
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 70);
}

// torchrun's shape where it would mean something else than under torchrun (no torch needed:
// refused before anything starts).
TEST_F(HvdrunArgs, TorchrunShapeFlagsThatMeanSomethingElseAreRefused) {
  ExpectUsageError({"--nproc-per-node", "2", "--nnodes", "2", "/bin/true"},
                   "--nnodes 2 needs the hosts: name them with -H");
  ExpectUsageError({"-np", "3", "--nproc-per-node", "2", "/bin/true"},
                   "-np 3 but --nproc-per-node 2 on 1 host(s) makes 2 ranks");
  ExpectUsageError({"-np", "1", "-x", "WORLD_SIZE=8", "/bin/true"},
                   "WORLD_SIZE is set by the launcher for each rank");
  ExpectUsageError({"--nproc_per_node", "auto", "/bin/true"}, "torchrun's auto, gpu and cpu");
  ExpectUsageError(
      {"--standalone", "--nnodes", "2", "-H", "a,b", "--nproc-per-node", "1", "/bin/true"},
      "--standalone runs one node");
  // In cluster mode the hosts must be named: a launcher would spread the ranks over any agents.
  WriteFile(dir_ / "token", "secret\n", 0600);
  for (const char* shape : {"--nproc-per-node", "--nnodes"}) {
    ExpectUsageError({"--launcher", "127.0.0.1:1", "--token-file", dir_ / "token", shape, "1",
                      "-np", "1", "/bin/true"},
                     std::string(shape) + " 1 in cluster mode needs the hosts named with -H");
  }
  ExpectUsageError({"--launcher", "127.0.0.1:1", "--token-file", dir_ / "token", "--standalone",
                    "-np", "1", "/bin/true"},
                   "--standalone in cluster mode needs its node named with -H");
}

// torchrun's rendezvous flags: --standalone is what hvdrun does anyway (a note, then the job
// runs); the others are refused with what hvdrun does instead, in both of torchrun's spellings.
TEST_F(HvdrunArgs, TorchrunRendezvousFlags) {
  ProcResult r = Hvdrun({"--standalone", "--nproc-per-node", "2", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.err, "hvdrun: --standalone: accepted; hvdrun runs the job on one node");
  for (const char* flag :
       {"--rdzv-backend", "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id",
        "--rdzv_id", "--master-addr", "--master_addr", "--master-port", "--master_port"}) {
    ExpectUsageError({"-np", "1", flag, "x", "/bin/true"},
                     std::string("hvdrun: ") + flag +
                         ": not needed: hvdrun's launcher places the ranks and rank 0's agent "
                         "chooses MASTER_ADDR and MASTER_PORT");
  }
  for (const char* flag : {"--node-rank", "--node_rank"}) {
    ExpectUsageError({"-np", "1", flag, "0", "/bin/true"},
                     std::string("hvdrun: ") + flag + ": not needed: hvdrun runs once for all");
  }
  // torchrun's other flags, in torch 1.13's spelling too: what to do instead, not "unknown".
  ExpectUsageError({"-np", "1", "-m", "pkg.train"},
                   "hvdrun: -m: hvdrun runs programs, not Python modules; name the interpreter "
                   "instead: hvdrun ... python3 -m MODULE");
  ExpectUsageError({"-np", "1", "--no_python", "/bin/true"}, "hvdrun: --no_python: not needed");
  ExpectUsageError({"-np", "1", "--tee", "3", "/bin/true"}, "instead, --output-filename DIR");
  ExpectUsageError({"-np", "1", "--monitor_interval", "5", "/bin/true"}, "not needed");
  ProcResult restarts = Hvdrun({"--nproc_per_node=1", "--max_restarts=1", "/bin/true"});
  EXPECT_EQ(restarts.exit_code, 0) << restarts.err;
  const std::string help = Hvdrun({"--help"}).out;
  EXPECT_HAS(help, "torchrun compatibility");
  EXPECT_HAS(help, "--rdzv-endpoint, --rdzv_endpoint HOST:PORT");
}

// hvdrun's -v is --verbose; horovodrun's -v (the version) is hvdrun's --version, anywhere.
TEST_F(HvdrunArgs, VerboseAndVersionSpellings) {
  ExpectUsageError({"-v"}, "horovodrun's -v is hvdrun --version");
  ProcResult r = Hvdrun({"-np", "2", "--version", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("hvdrun ", 0), 0u) << r.out;
  r = Hvdrun({"-np", "2", "-cb"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[X] TCP");
}

TEST_F(HvdrunArgs, BadTimelinePathBeforeAnythingStarts) {
  ExpectUsageError({"-np", "1", "--timeline-filename", dir_ / "nope/t.json", "/bin/true"},
                   "--timeline-filename " + (dir_ / "nope/t.json") + ": directory " +
                       (dir_ / "nope") + ": No such file or directory");
  ExpectUsageError({"-np", "1", "-x", "HVD_TIMELINE=" + (dir_ / "nope/t.json"), "/bin/true"},
                   "-x HVD_TIMELINE=" + (dir_ / "nope/t.json") + ": directory ");
}

TEST_F(HvdrunArgs, HorovodrunOptionsEndToEnd) {
  // A horovodrun command line, Open MPI hostfile and Horovod config file included.
  WriteFile(dir_ / "hostfile", "# pool\nlocalhost slots=2 max_slots=4\n");
  WriteFile(dir_ / "horovod.yaml",
            "controller: gloo\nparams:\n  cache_capacity: 64\nlogging:\n  level: ERROR\n");
  ProcResult r = Hvdrun({"-hostfile", dir_ / "hostfile", "--config-file", dir_ / "horovod.yaml",
                         "--no-hierarchical-allreduce", "-prefix-timestamp", "/bin/sh", "-c",
                         "echo $HVD_RANK $HVD_CACHE_CAPACITY $HVD_HIERARCHICAL_ALLREDUCE "
                         "$HVD_LOG_LEVEL"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // "Tue Jan  2 15:04:05 2024[0]<stdout>:...", as horovodrun's asctime prefix.
  for (const char* rank : {"0", "1"}) {
    const std::string tail = std::string("[") + rank + "]<stdout>:" + rank + " 64 0 error\n";
    const size_t at = r.out.find(tail);
    ASSERT_NE(at, std::string::npos) << r.out;
    const size_t bol = r.out.rfind('\n', at) == std::string::npos ? 0 : r.out.rfind('\n', at) + 1;
    EXPECT_EQ(at - bol, 24u) << r.out;  // strlen("Tue Jan  2 15:04:05 2024")
  }
  EXPECT_HAS(r.err, "horovod.yaml:1 (--gloo): hvd has one backend");
  EXPECT_EQ(r.err.find("hvd has one backend", r.err.find("one backend") + 1), std::string::npos);
}

}  // namespace
}  // namespace hvd::clitest
