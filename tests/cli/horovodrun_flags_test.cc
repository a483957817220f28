// horovodrun's flags as hvdrun reads them: each one to the variable of the same setting in the
// JobSpec (docs/configuration.md), the conflicts, the config file through the real parser, the
// timeline path checked up front, and the environment cluster mode forwards.
#include "cli/horovodrun_flags.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "cli/forward_env.h"
#include "cli/job_options.h"
#include "cli/timeline_path.h"
#include "testutil/expect.h"

namespace hvd::cli {
namespace {

class HorovodrunFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/horovodrun_flags_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    host_.cwd = dir_;
    host_.local_names = {"localhost", "127.0.0.1"};
    host_.getenv = [](const char* name) -> const char* {
      return std::string(name) == "PATH" ? "/usr/bin:/bin" : nullptr;
    };
  }
  void TearDown() override { (void)!std::system(("rm -rf " + dir_).c_str()); }

  void File(const std::string& name, const std::string& content) {
    std::ofstream(dir_ + "/" + name) << content;
  }
  Status Build(std::vector<std::string> args, control::JobSpec* spec) {
    control::FlagSet flags("hvdrun");
    JobFlags f;
    f.Register(&flags);
    args.insert(args.begin(), "hvdrun");
    args.push_back("/bin/true");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> program;
    HVD_RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &program));
    notes_ = JobNotes(f);
    return BuildJobSpec(f, program, host_, ProgramCheck::kAlways, spec);
  }
  // The spec's variables for `args` (with -np 1), which must build.
  std::map<std::string, std::string> Env(std::vector<std::string> args) {
    args.insert(args.begin(), {"-np", "1"});
    control::JobSpec spec;
    Status s = Build(args, &spec);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return {spec.env.begin(), spec.env.end()};
  }
  std::string Error(std::vector<std::string> args) {
    args.insert(args.begin(), {"-np", "1"});
    control::JobSpec spec;
    Status s = Build(args, &spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    return s.message();
  }

  std::string dir_;
  HostEnvironment host_;
  std::vector<std::string> notes_;
};

using Vars = std::map<std::string, std::string>;

TEST_F(HorovodrunFlags, EachFlagSetsItsVariable) {
  EXPECT_EQ(Env({"--cache-capacity", "512"}), (Vars{{"HVD_CACHE_CAPACITY", "512"}}));
  EXPECT_EQ(Env({"--cache-capacity", "0"}), (Vars{{"HVD_CACHE_CAPACITY", "0"}}));
  EXPECT_EQ(Env({"--hierarchical-allreduce"}), (Vars{{"HVD_HIERARCHICAL_ALLREDUCE", "1"}}));
  EXPECT_EQ(Env({"--no-hierarchical-allreduce"}), (Vars{{"HVD_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_EQ(Env({"--timeline-filename", "t.json", "--timeline-mark-cycles"}),
            (Vars{{"HVD_TIMELINE", "t.json"}, {"HVD_TIMELINE_MARK_CYCLES", "1"}}));
  EXPECT_EQ(Env({"--no-timeline-mark-cycles"}), (Vars{{"HVD_TIMELINE_MARK_CYCLES", "0"}}));
  EXPECT_EQ(Env({"--no-stall-check"}), (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "0"}}));
  EXPECT_EQ(Env({"--stall-check-warning-time-seconds", "90"}),
            (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "90"}}));
  EXPECT_EQ(Env({"--stall-check-shutdown-time-seconds", "300"}),
            (Vars{{"HVD_STALL_SHUTDOWN_TIME_SECONDS", "300"}}));
  EXPECT_EQ(Env({"--gloo-timeout-seconds", "45"}), (Vars{{"HVD_PEER_TIMEOUT_SECONDS", "45"}}));
  EXPECT_EQ(Env({"--log-level", "DEBUG"}), (Vars{{"HVD_LOG_LEVEL", "debug"}}));
  EXPECT_EQ(Env({"--log-level", "FATAL"}), (Vars{{"HVD_LOG_LEVEL", "error"}}));
  EXPECT_EQ(Env({"--tcp"}), (Vars{{"NCCL_IB_DISABLE", "1"}}));
}

TEST_F(HorovodrunFlags, FlagsWhoseMeaningIsHvdsBehaviourSetNothing) {
  for (const char* flag :
       {"--disable-cache", "--no-autotune", "--stall-check", "--log-without-timestamp",
        "--log-hide-timestamp", "--no-hierarchical-allgather", "--gloo", "--mpi",
        "--mpi-threads-disable", "--no-mpi-threads-disable", "--hierarchical-allgather"}) {
    EXPECT_EQ(Env({flag}), Vars{}) << flag;
  }
}

TEST_F(HorovodrunFlags, BackendAndAllgatherFlagsAreSaidOnce) {
  Env({"--gloo", "--mpi-threads-disable"});
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_HAS(notes_[0], "--gloo, --mpi-threads-disable: hvd has one backend");
  Env({"--hierarchical-allgather"});
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_HAS(notes_[0], "hvd's allgather is flat");
  Env({"--no-hierarchical-allgather"});
  EXPECT_TRUE(notes_.empty());
}

TEST_F(HorovodrunFlags, AliasesOfHvdsFlags) {
  File("hosts", "localhost slots=2 max_slots=4\n");
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-hostfile", dir_ + "/hosts"}, &spec).ok());
  EXPECT_EQ(spec.np, 2);
  ASSERT_TRUE(
      Build({"-np", "1", "--network-interfaces", "lo,eth0", "--network-interface", "ib0"}, &spec)
          .ok());
  EXPECT_EQ(spec.network_interfaces, "lo,eth0,ib0");
}

TEST_F(HorovodrunFlags, SlotsPerHost) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"--slots-per-host", "3", "-H", "localhost"}, &spec).ok());
  EXPECT_EQ(spec.np, 3);
  ASSERT_EQ(spec.hosts.size(), 1u);
  EXPECT_EQ(spec.hosts[0].slots, 3);
  ASSERT_TRUE(Build({"--slots-per-host", "3", "-H", "localhost:1"}, &spec).ok());
  EXPECT_EQ(spec.hosts[0].slots, 1);  // an explicit count wins
  EXPECT_HAS(Error({"--slots-per-host", "2"}), "--slots-per-host sets the slots of the hosts");
  EXPECT_HAS(Error({"--slots-per-host", "0", "-H", "localhost"}), "--slots-per-host must be");
}

TEST_F(HorovodrunFlags, ConflictsAndBadValuesNameTheFlags) {
  EXPECT_HAS(Error({"--hierarchical-allreduce", "--no-hierarchical-allreduce"}),
             "--hierarchical-allreduce and --no-hierarchical-allreduce contradict each other");
  EXPECT_HAS(Error({"--gloo", "--mpi"}), "--gloo and --mpi contradict");
  EXPECT_HAS(Error({"--no-stall-check", "--stall-check-warning-time-seconds", "5"}),
             "--no-stall-check turns off the stall check that "
             "--stall-check-warning-time-seconds configures");
  EXPECT_HAS(Error({"--no-stall-check", "--stall-timeout", "60"}), "--stall-timeout");
  EXPECT_HAS(Error({"--timeline-mark-cycles"}), "pass --timeline-filename FILE too");
  EXPECT_HAS(Error({"--cache-capacity", "-1"}), "--cache-capacity must be between 0");
  EXPECT_HAS(Error({"--gloo-timeout-seconds", "0"}), "--gloo-timeout-seconds must be");
  EXPECT_HAS(Error({"--stall-check-shutdown-time-seconds", "-5"}), "must be a number of seconds");
  EXPECT_HAS(Error({"--log-level", "LOUD"}), "--log-level 'LOUD' is not one of TRACE");
  // -x's spelling was left to every rank's hvd::Init(), which failed after the job started.
  EXPECT_HAS(Error({"-x", "HVD_LOG_LEVEL=loud"}),
             "-x HVD_LOG_LEVEL=loud names no log level: give trace, debug, info, warning or error");
  EXPECT_HAS(Error({"-x", "HOROVOD_LOG_LEVEL=verbose"}), "-x HOROVOD_LOG_LEVEL=verbose names no");
  EXPECT_EQ(Env({"-x", "HVD_LOG_LEVEL=WARN"}), (Vars{{"HVD_LOG_LEVEL", "WARN"}}));
  EXPECT_HAS(Error({"--cache-capacity", "8", "-x", "HVD_CACHE_CAPACITY=9"}),
             "--cache-capacity and -x HVD_CACHE_CAPACITY both set HVD_CACHE_CAPACITY");
}

TEST_F(HorovodrunFlags, RefusedFlagsSayWhatInstead) {
  for (const char* flag :
       {"--autotune", "--jsrun", "--mpi-args", "--num-nccl-streams", "--log-with-timestamp"}) {
    const std::string m = Error({flag, "x"});
    EXPECT_HAS(m, std::string("hvdrun: ") + flag + ": ");
    EXPECT_HAS(m, "; instead, ");
  }
}

TEST_F(HorovodrunFlags, ConfigFileThroughTheFlagParser) {
  File("h.yaml",
       "params:\n  cache_capacity: 64\n  hierarchical_allreduce: false\n"
       "logging:\n  level: info\n");
  EXPECT_EQ(Env({"--config-file", dir_ + "/h.yaml"}), (Vars{{"HVD_CACHE_CAPACITY", "64"},
                                                            {"HVD_HIERARCHICAL_ALLREDUCE", "0"},
                                                            {"HVD_LOG_LEVEL", "info"}}));
  // The command line wins, before or after the file.
  EXPECT_EQ(Env({"--cache-capacity", "8", "--config-file", dir_ + "/h.yaml",
                 "--hierarchical-allreduce", "--log-level", "ERROR"}),
            (Vars{{"HVD_CACHE_CAPACITY", "8"},
                  {"HVD_HIERARCHICAL_ALLREDUCE", "1"},
                  {"HVD_LOG_LEVEL", "error"}}));
  File("bad.yaml", "params:\n  cache_capacity: -3\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/bad.yaml"}),
             dir_ + "/bad.yaml:2 (--cache-capacity) must be between 0");
  File("bad2.yaml", "params:\n  cache_capacity: many\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/bad2.yaml"}),
             dir_ + "/bad2.yaml:2: flag --cache-capacity: 'many'");
  File("bad3.yaml", "autotune:\n  enabled: true\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/bad3.yaml"}),
             dir_ + "/bad3.yaml:2: --autotune: hvd has no autotuning");
}

// The cache bound is the runtime's (base::kMaxCacheCapacity): no value passes here and fails
// in every rank's hvd.init().
TEST_F(HorovodrunFlags, CacheCapacityHasTheRuntimesBound) {
  EXPECT_EQ(Env({"--cache-capacity", "1048576"}), (Vars{{"HVD_CACHE_CAPACITY", "1048576"}}));
  EXPECT_HAS(Error({"--cache-capacity", "1048577"}),
             "--cache-capacity must be between 0 (no cache) and 1048576 entries, not 1048577");
}

// A config file's range errors keep its file:line, and name the bound.
TEST_F(HorovodrunFlags, ConfigFileRangeErrorsNameFileAndLine) {
  File("c.yaml", "params:\n  cycle_time_ms: 70000\n");
  EXPECT_EQ(Error({"--config-file", dir_ + "/c.yaml"}),
            dir_ +
                "/c.yaml:2 (--cycle-time-ms) must be a number of milliseconds above 0 and at "
                "most 60000, not 70000");
  EXPECT_EQ(Error({"--cycle-time-ms", "70000"}),
            "--cycle-time-ms must be a number of milliseconds above 0 and at most 60000, not "
            "70000");
  File("f.yaml", "params:\n  fusion_threshold_mb: -1\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/f.yaml"}), "f.yaml:2 (--fusion-threshold-mb) must");
  File("s.yaml", "stall_check:\n  warning_time_seconds: 0\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/s.yaml"}),
             "s.yaml:2 (--stall-check-warning-time-seconds) must be a number of seconds above 0");
  File("l.yaml", "logging:\n  level: LOUD\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/l.yaml"}), "l.yaml:2 (--log-level) 'LOUD'");
}

// Horovod lets stall_check.enabled: false win over the file's own warning time; only both on the
// command line contradict each other, and a command-line setting wins over the file.
TEST_F(HorovodrunFlags, StallCheckDisabledInTheConfigFileWins) {
  File("off.yaml", "stall_check:\n  enabled: false\n  warning_time_seconds: 120\n");
  EXPECT_EQ(Env({"--config-file", dir_ + "/off.yaml"}),
            (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "0"}}));
  EXPECT_EQ(Env({"--config-file", dir_ + "/off.yaml", "--stall-check-time", "30"}),
            (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "30"}}));
  File("time.yaml", "stall_check:\n  warning_time_seconds: 120\n");
  EXPECT_EQ(Env({"--config-file", dir_ + "/time.yaml", "--no-stall-check"}),
            (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "0"}}));
  EXPECT_EQ(Env({"--config-file", dir_ + "/time.yaml"}),
            (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "120"}}));
  EXPECT_HAS(Error({"--no-stall-check", "--stall-check-time", "5"}),
             "--no-stall-check turns off the stall check that --stall-check-time configures");
  EXPECT_EQ(Env({"--stall-check=false"}), (Vars{{"HVD_STALL_CHECK_TIME_SECONDS", "0"}}));
}

// -x is the command line: it wins over the config file, silently (HVD_* or HOROVOD_* spelling).
TEST_F(HorovodrunFlags, DashXWinsOverTheConfigFile) {
  File("h.yaml",
       "params:\n  cache_capacity: 2048\n  cycle_time_ms: 99999\nlogging:\n  level: debug\n");
  EXPECT_EQ(
      Env({"--config-file", dir_ + "/h.yaml", "-x", "HVD_CACHE_CAPACITY=5", "-x",
           "HVD_CYCLE_TIME=3", "-x", "HOROVOD_LOG_LEVEL=info"}),
      (Vars{{"HVD_CACHE_CAPACITY", "5"}, {"HVD_CYCLE_TIME", "3"}, {"HOROVOD_LOG_LEVEL", "info"}}));
  // On the command line both are the user's: still a conflict to resolve.
  EXPECT_HAS(Error({"--cache-capacity", "8", "-x", "HVD_CACHE_CAPACITY=9"}),
             "--cache-capacity and -x HVD_CACHE_CAPACITY both set HVD_CACHE_CAPACITY");
}

// --gloo=false asks for no backend: no note, no contradiction with --mpi; switch pairs that agree
// are no contradiction either.
TEST_F(HorovodrunFlags, SwitchValuesAreHonoured) {
  EXPECT_EQ(Env({"--gloo=false"}), Vars{});
  EXPECT_TRUE(notes_.empty());
  EXPECT_EQ(Env({"--gloo=false", "--mpi"}), Vars{});
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_HAS(notes_[0], "--mpi: hvd has one backend");
  EXPECT_EQ(Env({"--hierarchical-allgather=false"}), Vars{});
  EXPECT_TRUE(notes_.empty());
  EXPECT_EQ(Env({"--hierarchical-allreduce=false", "--no-hierarchical-allreduce"}),
            (Vars{{"HVD_HIERARCHICAL_ALLREDUCE", "0"}}));
  EXPECT_EQ(Env({"--timeline-filename", "t.json", "--timeline-mark-cycles",
                 "--no-timeline-mark-cycles=false"}),
            (Vars{{"HVD_TIMELINE", "t.json"}, {"HVD_TIMELINE_MARK_CYCLES", "1"}}));
  EXPECT_EQ(Env({"--no-timeline-mark-cycles=false", "--timeline-filename", "t.json"}),
            (Vars{{"HVD_TIMELINE", "t.json"}, {"HVD_TIMELINE_MARK_CYCLES", "1"}}));
  EXPECT_HAS(Error({"--no-autotune=false"}), "hvd has no autotuning");
  EXPECT_HAS(Error({"--log-without-timestamp=false"}), "--prefix-output-with-timestamp");
}

// torchrun's shape in cluster mode: without named hosts the launcher could spread the ranks.
TEST_F(HorovodrunFlags, TorchrunShapeInClusterModeNeedsTheHosts) {
  for (const std::vector<std::string>& shape :
       std::vector<std::vector<std::string>>{{"--nproc-per-node", "4"},
                                             {"--nnodes", "1", "--nproc-per-node", "4"},
                                             {"--nnodes", "1", "-np", "4"}}) {
    control::FlagSet flags("hvdrun");
    JobFlags f;
    f.Register(&flags);
    std::vector<std::string> args = {"hvdrun"};
    args.insert(args.end(), shape.begin(), shape.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> program;
    ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &program).ok());
    control::JobSpec spec;
    Status s = BuildJobSpec(f, {"./train"}, host_, ProgramCheck::kWhenLocal, &spec);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << shape[1];
    EXPECT_HAS(s.message(), "in cluster mode needs the hosts named with -H");
    // Local mode: every rank runs here, which is one node.
    EXPECT_TRUE(BuildJobSpec(f, {"/bin/true"}, host_, ProgramCheck::kAlways, &spec).ok());
  }
}

TEST_F(HorovodrunFlags, TimelinePathIsCheckedUpFront) {
  EXPECT_EQ(Error({"--timeline-filename", dir_ + "/nope/t.json"}),
            "--timeline-filename " + dir_ + "/nope/t.json: directory " + dir_ +
                "/nope: No such file or directory");
  EXPECT_HAS(Error({"--timeline-filename", "nope/t.json"}), "--timeline-filename nope/t.json: ");
  EXPECT_HAS(Error({"--timeline-filename", dir_}), ": Is a directory");
  File("plain", "x");
  EXPECT_HAS(Error({"--timeline-filename", dir_ + "/plain/t.json"}), ": Not a directory");
  // As the user wrote it: -x NAME=VALUE.
  EXPECT_EQ(Error({"-x", "HOROVOD_TIMELINE=" + dir_ + "/nope/t.json"}),
            "-x HOROVOD_TIMELINE=" + dir_ + "/nope/t.json: directory " + dir_ +
                "/nope: No such file or directory");
  File("c.yaml", "timeline:\n  filename: " + dir_ + "/nope/t.json\n");
  EXPECT_HAS(Error({"--config-file", dir_ + "/c.yaml"}), "c.yaml:2 (--timeline-filename) ");
  // Fine: a new file in an existing directory, relative to the working dir, and DYNAMIC.
  EXPECT_TRUE(CheckTimelinePath("--timeline-filename", "t.json", dir_).ok());
  EXPECT_TRUE(CheckTimelinePath("-x HVD_TIMELINE", "DYNAMIC", dir_).ok());
  // Ranks on other hosts: only the agent there can tell (as with the program).
  control::JobSpec spec;
  control::FlagSet flags("hvdrun");
  JobFlags f;
  f.Register(&flags);
  std::vector<std::string> args = {"hvdrun", "-H", "gpu1:1", "--timeline-filename", "/nope/t"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<std::string> program;
  ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &program).ok());
  EXPECT_TRUE(BuildJobSpec(f, {"./train"}, host_, ProgramCheck::kWhenLocal, &spec).ok());
}

TEST(ForwardEnv, ForwardsAllButTheDenyList) {
  std::map<std::string, std::string> env = {{"FROM_X", "flag"}};
  std::vector<std::string> held;
  ForwardEnvironment({"PATH=/opt/bin:/usr/bin", "MY_SETTING=a=b", "FROM_X=shell", "HOSTNAME=me",
                      "PWD=/home/me", "SSH_AUTH_SOCK=/tmp/s", "XDG_RUNTIME_DIR=/run/1",
                      "HVD_RANK=3", "RANK=3", "MASTER_PORT=1", "CUDA_VISIBLE_DEVICES=0",
                      "HVD_LAUNCHER=l:1", "HVD_LOG_LEVEL=info", "BASH_FUNC_f%%=() {}", "_=/x"},
                     &env, &held);
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"FROM_X", "flag"},
                                                     {"HVD_LOG_LEVEL", "info"},
                                                     {"MY_SETTING", "a=b"},
                                                     {"PATH", "/opt/bin:/usr/bin"}}));
  EXPECT_EQ(held, (std::vector<std::string>{"BASH_FUNC_f%%", "CUDA_VISIBLE_DEVICES", "HOSTNAME",
                                            "HVD_LAUNCHER", "HVD_RANK", "MASTER_PORT", "PWD",
                                            "RANK", "SSH_AUTH_SOCK", "XDG_RUNTIME_DIR", "_"}));
}

// The job's environment is stored in the launcher's jobs.db and sent to every agent: what looks
// like a credential stays here unless -x names it.
TEST(ForwardEnv, SecretLookingNamesAreHeldBack) {
  std::map<std::string, std::string> env = {{"GITHUB_TOKEN", "from -x"}};
  std::vector<std::string> held;
  ForwardEnvironment(
      {"AWS_SECRET_ACCESS_KEY=k", "AWS_SESSION_TOKEN=t", "AWS_ACCESS_KEY_ID=id",
       "GITHUB_TOKEN=shell", "HF_TOKEN=h", "DB_PASSWORD=p", "my_passwd=p", "CLIENT_SECRET_FILE=/s",
       "OPENAI_API_KEY=o", "TOKEN=t", "TOKENIZERS_PARALLELISM=false", "NCCL_DEBUG=INFO"},
      &env, &held);
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"AWS_ACCESS_KEY_ID", "id"},
                                                     {"GITHUB_TOKEN", "from -x"},
                                                     {"NCCL_DEBUG", "INFO"},
                                                     {"TOKENIZERS_PARALLELISM", "false"}}));
  EXPECT_EQ(held, (std::vector<std::string>{"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                            "CLIENT_SECRET_FILE", "DB_PASSWORD", "HF_TOKEN",
                                            "OPENAI_API_KEY", "TOKEN", "my_passwd"}));
  for (const std::string& name : held) EXPECT_TRUE(LooksSecret(name)) << name;
  EXPECT_TRUE(LooksSecret("GITHUB_TOKEN"));  // passed by -x above, so not said to be held back
  EXPECT_FALSE(LooksSecret("HVD_RANK"));
}

}  // namespace
}  // namespace hvd::cli
