// The run/submit flags to JobSpec: host lists, -x, runtime knobs, the working directory and the
// shell-like program lookup, with the environment and the current directory injected.
#include "cli/job_options.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include "testutil/expect.h"

#include <cstdlib>
#include <fstream>
#include <map>

namespace hvd::cli {
namespace {

class JobOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/job_options_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    host_.cwd = dir_;
    host_.local_names = {"localhost", "127.0.0.1", "thishost"};
    host_.getenv = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
    env_["PATH"] = "/usr/bin:/bin";
  }
  void TearDown() override { (void)!std::system(("rm -rf " + dir_).c_str()); }

  void File(const std::string& name, const std::string& content, mode_t mode) {
    std::ofstream(dir_ + "/" + name) << content;
    chmod((dir_ + "/" + name).c_str(), mode);
  }

  // Parses `args` as hvdrun's command line (flags, then the program) into a spec.
  Status Build(std::vector<std::string> args, control::JobSpec* spec,
               ProgramCheck check = ProgramCheck::kAlways) {
    control::FlagSet flags("hvdrun");
    JobFlags f;
    f.Register(&flags);
    args.insert(args.begin(), "hvdrun");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> program;
    HVD_RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &program));
    return BuildJobSpec(f, program, host_, check, spec);
  }
  std::string Error(const std::vector<std::string>& args,
                    ProgramCheck check = ProgramCheck::kAlways) {
    control::JobSpec spec;
    Status s = Build(args, &spec, check);
    EXPECT_FALSE(s.ok());
    return s.message();
  }

  std::string dir_;
  HostEnvironment host_;
  std::map<std::string, std::string> env_;
};

TEST_F(JobOptions, MinimalSpec) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "4", "/bin/sh", "-c", "echo hi"}, &spec).ok());
  EXPECT_EQ(spec.np, 4);
  ASSERT_EQ(spec.argv.size(), 3u);
  EXPECT_EQ(spec.argv[0], "/bin/sh");
  EXPECT_EQ(spec.argv[1], "-c");
  EXPECT_EQ(spec.argv[2], "echo hi");
  EXPECT_EQ(spec.working_dir, dir_);
  EXPECT_TRUE(spec.hosts.empty());
  EXPECT_TRUE(spec.env.empty());
  EXPECT_FALSE(spec.detached);
}

TEST_F(JobOptions, ProgramFlagsAreNotHvdrunFlags) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"--num-proc", "2", "/bin/echo", "-np", "9", "-x", "--bogus"}, &spec).ok());
  EXPECT_EQ(spec.np, 2);
  EXPECT_EQ(spec.argv.size(), 5u);
  EXPECT_TRUE(spec.env.empty());
}

TEST_F(JobOptions, HostsAndDefaultNp) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-H", "a:2,b:3", "/bin/true"}, &spec, ProgramCheck::kWhenLocal).ok());
  EXPECT_EQ(spec.np, 5);  // all slots
  ASSERT_EQ(spec.hosts.size(), 2u);
  EXPECT_EQ(spec.hosts[1].host, "b");
  EXPECT_EQ(spec.hosts[1].slots, 3);
  ASSERT_TRUE(Build({"-np", "3", "--hosts=a:2,b:3", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.np, 3);
  EXPECT_HAS(Error({"-np", "6", "-H", "a:2,b:3", "/bin/true"}),
             "-np 6 needs 6 slots but the hosts offer 5 (a:2,b:3)");
  EXPECT_HAS(Error({"-np", "1", "-H", "a:2,", "/bin/true"}), "-H: host list 'a:2,'");
}

TEST_F(JobOptions, Hostfile) {
  File("hosts", "# pool\nnode1 slots=2\nnode2\n", 0644);
  control::JobSpec spec;
  ASSERT_TRUE(Build({"--hostfile", dir_ + "/hosts", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.np, 3);
  EXPECT_EQ(spec.hosts.size(), 2u);
  File("bad", "node1 slots=2\nnode1 slots=1\n", 0644);
  EXPECT_HAS(Error({"--hostfile", dir_ + "/bad", "/bin/true"}),
             "hostfile " + dir_ + "/bad line 2 'node1 slots=1'");
  EXPECT_HAS(Error({"-np", "1", "--hostfile", dir_ + "/none", "/bin/true"}),
             "No such file or directory");
}

// An empty host list (an unset shell variable) is refused, not taken as "run here".
TEST_F(JobOptions, AnEmptyHostListIsRefused) {
  EXPECT_HAS(Error({"-np", "2", "-H", "", "/bin/true"}),
             "-H '' names no host: give HOST[:SLOTS],..., or leave it out");
  EXPECT_HAS(Error({"-np", "2", "--hostfile", "", "/bin/true"}),
             "--hostfile '' names no host: give a hostfile");
  EXPECT_HAS(Error({"-np", "2", "--host-discovery-script", "", "/bin/true"}),
             "--host-discovery-script '' names no host: give a command");
}

TEST_F(JobOptions, NpRequiredWithoutHosts) {
  EXPECT_HAS(Error({"/bin/true"}), "-np N is required");
  EXPECT_HAS(Error({"-np", "0", "/bin/true"}), "at least 1");
  EXPECT_HAS(Error({"-np", "-3", "/bin/true"}), "at least 1");
  EXPECT_HAS(Error({"-np", "1"}), "no program to run");
}

TEST_F(JobOptions, EnvFlags) {
  env_["FROM_HERE"] = "copied value";
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "-x", "A=1", "-x", "FROM_HERE", "-x", "EMPTY=", "-x", "EQ=a=b",
                     "/bin/true"},
                    &spec)
                  .ok());
  EXPECT_EQ(spec.env.at("A"), "1");
  EXPECT_EQ(spec.env.at("FROM_HERE"), "copied value");
  EXPECT_EQ(spec.env.at("EMPTY"), "");
  EXPECT_EQ(spec.env.at("EQ"), "a=b");
  EXPECT_HAS(Error({"-np", "1", "-x", "NOPE", "/bin/true"}),
             "-x NOPE: NOPE is not set in hvdrun's environment; set it, or pass -x NOPE=VALUE");
  EXPECT_HAS(Error({"-np", "1", "-x", "=v", "/bin/true"}), "'' is not a variable name");
  EXPECT_HAS(Error({"-np", "1", "-x", "A-B=1", "/bin/true"}), "'A-B' is not a variable name");
  EXPECT_HAS(Error({"-np", "1", "-x", "HOROVOD_SIZE=2", "/bin/true"}), "HOROVOD_SIZE is set by");
}

TEST_F(JobOptions, KnobsBecomeRuntimeVariables) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "--fusion-threshold-mb", "64", "--cycle-time-ms", "0.5",
                     "--timeline-filename", "/tmp/t.json", "--start-timeout", "120", "/bin/true"},
                    &spec)
                  .ok());
  EXPECT_EQ(spec.env.at("HVD_FUSION_THRESHOLD"), "67108864");
  EXPECT_EQ(spec.env.at("HVD_CYCLE_TIME"), "0.5");
  EXPECT_EQ(spec.env.at("HVD_TIMELINE"), "/tmp/t.json");
  // The start timeout is the launcher's to enforce (it sets the runtime's own wait from it).
  EXPECT_EQ(spec.start_timeout_ms, 120000);
  EXPECT_EQ(spec.env.count("HVD_START_TIMEOUT_SECONDS"), 0u);
  EXPECT_EQ(spec.stall_timeout_ms, -1);
  EXPECT_EQ(spec.kill_grace_ms, -1);
  EXPECT_EQ(spec.max_restarts, 0);
  ASSERT_TRUE(Build({"-np", "1", "--fusion-threshold-mb", "0", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.env.at("HVD_FUSION_THRESHOLD"), "0");  // 0 disables fusion
  ASSERT_TRUE(Build({"-np", "1", "--fusion-threshold-mb", "0.5", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.env.at("HVD_FUSION_THRESHOLD"), "524288");
  // Knobs not given are not set: the runtime's defaults apply.
  ASSERT_TRUE(Build({"-np", "1", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.env.count("HVD_CYCLE_TIME"), 0u);
}

TEST_F(JobOptions, LimitsAndRestarts) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "--start-timeout", "0", "--stall-timeout", "90", "--kill-grace",
                     "0.5", "--max-restarts", "3", "/bin/true"},
                    &spec)
                  .ok());
  EXPECT_NE(spec.start_timeout_ms, -1);
  EXPECT_EQ(spec.start_timeout_ms, 0);  // no limit
  EXPECT_EQ(spec.stall_timeout_ms, 90000);
  EXPECT_EQ(spec.kill_grace_ms, 500);
  EXPECT_EQ(spec.max_restarts, 3);
  // A stall is reported at half the timeout, so it is known before it is fatal.
  EXPECT_EQ(spec.env.at("HVD_STALL_CHECK_TIME_SECONDS"), "45");
  ASSERT_TRUE(Build({"-np", "1", "--stall-timeout", "300", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.env.at("HVD_STALL_CHECK_TIME_SECONDS"), "60");
  ASSERT_TRUE(
      Build({"-np", "1", "--stall-timeout", "30", "--stall-check-time", "2", "/bin/true"}, &spec)
          .ok());
  EXPECT_EQ(spec.env.at("HVD_STALL_CHECK_TIME_SECONDS"), "2");
  // A check time given with -x, in either spelling, is kept: none is derived over it.
  for (const char* var : {"HVD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_CHECK_TIME_SECONDS"}) {
    ASSERT_TRUE(
        Build({"-np", "1", "--stall-timeout", "30", "-x", std::string(var) + "=7", "/bin/true"},
              &spec)
            .ok())
        << var;
    EXPECT_EQ(spec.env.at(var), "7");
    EXPECT_EQ(spec.env.count(std::string(var) == "HVD_STALL_CHECK_TIME_SECONDS"
                                 ? "HOROVOD_STALL_CHECK_TIME_SECONDS"
                                 : "HVD_STALL_CHECK_TIME_SECONDS"),
              0u);
  }
  // --thread-affinity and -x in Horovod's name clash too.
  EXPECT_HAS(
      Error({"-np", "1", "--thread-affinity", "0", "-x", "HOROVOD_THREAD_AFFINITY=1", "/bin/true"}),
      "-x HOROVOD_THREAD_AFFINITY both set HVD_THREAD_AFFINITY; keep one of them");
  EXPECT_HAS(Error({"-np", "1", "--stall-check-time", "0", "/bin/true"}), "--stall-check-time");
  EXPECT_HAS(Error({"-np", "1", "--stall-timeout", "-1", "/bin/true"}), "not -1");
}

TEST_F(JobOptions, ElasticFlags) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "2", "/bin/true"}, &spec).ok());
  EXPECT_FALSE(control::IsElastic(spec));
  EXPECT_EQ(spec.min_np, 0);
  EXPECT_EQ(spec.max_np, 0);
  // --min-np alone: the job starts that many workers.
  ASSERT_TRUE(Build({"--min-np", "3", "/bin/true"}, &spec).ok());
  EXPECT_TRUE(control::IsElastic(spec));
  EXPECT_EQ(spec.np, 3);
  EXPECT_EQ(spec.min_np, 3);
  EXPECT_EQ(spec.max_np, 3);
  EXPECT_EQ(spec.elastic_timeout_ms, 600000);  // Horovod's 600 s
  EXPECT_EQ(spec.reset_limit, 0);
  // --max-np with --min-np: -np defaults to the most.
  ASSERT_TRUE(Build({"--min-np", "1", "--max-np", "4", "--elastic-timeout", "2.5", "--reset-limit",
                     "6", "/bin/true"},
                    &spec)
                  .ok());
  EXPECT_EQ(spec.np, 4);
  EXPECT_EQ(spec.min_np, 1);
  EXPECT_EQ(spec.max_np, 4);
  EXPECT_EQ(spec.elastic_timeout_ms, 2500);
  EXPECT_EQ(spec.reset_limit, 6);
  // horovodrun's --blacklist-cooldown-range MIN MAX (two arguments).
  ASSERT_TRUE(
      Build({"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "10", "100", "/bin/true"},
            &spec)
          .ok());
  EXPECT_EQ(spec.cooldown_min_ms, 10000);
  EXPECT_EQ(spec.cooldown_max_ms, 100000);
  EXPECT_HAS(
      Build({"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "100", "10", "/bin/true"},
            &spec)
          .message(),
      "0 < MIN <= MAX");
  // One value: the program became MAX, and its first argument was said not to exist.
  EXPECT_HAS(Build({"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "/bin/echo",
                    "no-such-program-hvd"},
                   &spec)
                 .message(),
             "--blacklist-cooldown-range: give two numbers of seconds MIN MAX");
  // With -np, the others default to it.
  ASSERT_TRUE(Build({"-np", "4", "--min-np", "2", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.np, 4);
  EXPECT_EQ(spec.min_np, 2);
  EXPECT_EQ(spec.max_np, 4);
  // horovodrun's spellings.
  ASSERT_TRUE(Build({"--min-num-proc", "1", "--max-num-proc", "3", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.np, 3);
  EXPECT_EQ(spec.min_np, 1);
  EXPECT_EQ(spec.max_np, 3);

  EXPECT_HAS(Error({"-np", "2", "--elastic-timeout", "5", "/bin/true"}),
             "--elastic-timeout: applies to elastic jobs only");
  EXPECT_HAS(Error({"-np", "2", "--reset-limit", "1", "/bin/true"}),
             "--reset-limit: applies to elastic jobs only");
  EXPECT_HAS(Error({"--min-np", "1", "--elastic-timeout", "0", "/bin/true"}), "--elastic-timeout");
  EXPECT_HAS(Error({"--min-np", "1", "--reset-limit", "-1", "/bin/true"}), "--reset-limit");
  EXPECT_HAS(Error({"-np", "2", "--min-np", "3", "/bin/true"}), "--min-np 3, -np 2");
  EXPECT_HAS(Error({"-np", "4", "--max-np", "2", "/bin/true"}), "--min-np 4, -np 4, --max-np 2");
}

TEST_F(JobOptions, GpuIsolationIsOptIn) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "2", "/bin/true"}, &spec).ok());
  EXPECT_FALSE(spec.gpu_isolation);  // every GPU of the host visible, as under horovodrun
  ASSERT_TRUE(Build({"-np", "2", "--gpu-isolation", "/bin/true"}, &spec).ok());
  EXPECT_TRUE(spec.gpu_isolation);
  EXPECT_FALSE(spec.env.count("CUDA_VISIBLE_DEVICES"));  // the agent's to set, per slot
  ASSERT_TRUE(Build({"-np", "2", "--gpu-isolation=false", "/bin/true"}, &spec).ok());
  EXPECT_FALSE(spec.gpu_isolation);
  // After the program it is the program's.
  ASSERT_TRUE(Build({"-np", "1", "/bin/echo", "--gpu-isolation"}, &spec).ok());
  EXPECT_FALSE(spec.gpu_isolation);
}

TEST_F(JobOptions, BadKnobs) {
  EXPECT_HAS(Error({"-np", "1", "--fusion-threshold-mb", "-1", "/bin/true"}), "between 0");
  EXPECT_HAS(Error({"-np", "1", "--fusion-threshold-mb", "nan", "/bin/true"}), "not a number");
  EXPECT_HAS(Error({"-np", "1", "--cycle-time-ms", "-2", "/bin/true"}), "--cycle-time-ms");
  EXPECT_HAS(Error({"-np", "1", "--start-timeout", "-5", "/bin/true"}), "not -5");
  EXPECT_HAS(Error({"-np", "1", "--timeline-filename", "", "/bin/true"}), "is empty");
  EXPECT_HAS(Error({"-np", "1", "-x", "HVD_TIMELINE=a", "--timeline-filename", "b", "/bin/true"}),
             "keep one of them");
  // Horovod's names for the same variables clash too (their value was dropped silently).
  EXPECT_HAS(
      Error({"-np", "1", "-x", "HOROVOD_TIMELINE=a", "--timeline-filename", "b", "/bin/true"}),
      "--timeline-filename and -x HOROVOD_TIMELINE both set HVD_TIMELINE; keep one of them");
  EXPECT_HAS(Error({"-np", "1", "--fusion-threshold-mb", "1", "-x", "HOROVOD_FUSION_THRESHOLD=0",
                    "/bin/true"}),
             "-x HOROVOD_FUSION_THRESHOLD both set HVD_FUSION_THRESHOLD; keep one of them");
}

TEST_F(JobOptions, NetworkInterfaceFlagOrHvdIface) {
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.network_interfaces, "");
  ASSERT_TRUE(
      Build({"-np", "1", "--network-interface", "eth1,10.0.0.0/8", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.network_interfaces, "eth1,10.0.0.0/8");
  env_["HVD_IFACE"] = "ib0";
  ASSERT_TRUE(Build({"-np", "1", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.network_interfaces, "ib0");
  ASSERT_TRUE(Build({"-np", "1", "--network-interface", "eth2", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.network_interfaces, "eth2");  // the flag wins
  EXPECT_HAS(Error({"-np", "1", "--network-interface", "10.0.0.0/33", "/bin/true"}),
             "--network-interface: '10.0.0.0/33' is not an IPv4 subnet");
  EXPECT_HAS(Error({"-np", "1", "--network-interface", "eth0,,eth1", "/bin/true"}),
             "has an empty entry");
  env_["HVD_IFACE"] = "bad name";
  EXPECT_HAS(Error({"-np", "1", "/bin/true"}), "HVD_IFACE: 'bad name' is not an interface name");
}

TEST_F(JobOptions, WorkingDir) {
  mkdir((dir_ + "/sub").c_str(), 0755);
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "--working-dir", "sub", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.working_dir, dir_ + "/sub");
  ASSERT_TRUE(Build({"-np", "1", "--working-dir", "/", "/bin/true"}, &spec).ok());
  EXPECT_EQ(spec.working_dir, "/");
  EXPECT_HAS(Error({"-np", "1", "--working-dir", "missing", "/bin/true"}),
             "--working-dir " + dir_ + "/missing: No such file or directory");
  File("plain", "", 0644);
  EXPECT_HAS(Error({"-np", "1", "--working-dir", "plain", "/bin/true"}), "Not a directory");
}

TEST_F(JobOptions, RelativeProgramIsMadeAbsoluteAgainstTheWorkingDir) {
  mkdir((dir_ + "/sub").c_str(), 0755);
  File("sub/train", "#!/bin/sh\n", 0755);
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "--working-dir", "sub", "./train", "--lr", "1"}, &spec).ok());
  EXPECT_EQ(spec.argv[0], dir_ + "/sub/train");
  EXPECT_EQ(spec.argv[1], "--lr");
  ASSERT_TRUE(Build({"-np", "1", "sub/train"}, &spec).ok());
  EXPECT_EQ(spec.argv[0], dir_ + "/sub/train");
}

TEST_F(JobOptions, MissingOrUnrunnableProgramFailsLikeAShell) {
  control::JobSpec spec;
  Status s = Build({"-np", "1", "./trian"}, &spec);
  EXPECT_EQ(s.message(), "./trian: No such file or directory");
  File("data.txt", "", 0644);
  EXPECT_HAS(Error({"-np", "1", "./data.txt"}), "./data.txt: Permission denied");
  mkdir((dir_ + "/d").c_str(), 0755);
  EXPECT_HAS(Error({"-np", "1", "./d"}), "./d: Is a directory");
  EXPECT_HAS(Error({"-np", "1", "./data.txt/x"}), "./data.txt/x: Not a directory");
  EXPECT_HAS(Error({"-np", "1", "definitely-not-a-command"}),
             "definitely-not-a-command: command not found");
}

TEST_F(JobOptions, PathLookup) {
  mkdir((dir_ + "/bin1").c_str(), 0755);
  mkdir((dir_ + "/bin2").c_str(), 0755);
  File("bin1/tool", "", 0644);  // not executable: skipped, as a shell does
  File("bin2/tool", "#!/bin/sh\n", 0755);
  env_["PATH"] = dir_ + "/bin1:" + dir_ + "/bin2:/bin";
  control::JobSpec spec;
  ASSERT_TRUE(Build({"-np", "1", "tool"}, &spec).ok());
  EXPECT_EQ(spec.argv[0], dir_ + "/bin2/tool");
  // Only non-executable matches: the shell's "Permission denied".
  env_["PATH"] = dir_ + "/bin1";
  EXPECT_HAS(Error({"-np", "1", "tool"}), "tool: Permission denied");
  // An empty PATH entry is the working directory.
  File("here", "#!/bin/sh\n", 0755);
  env_["PATH"] = ":/bin";
  ASSERT_TRUE(Build({"-np", "1", "here"}, &spec).ok());
  EXPECT_EQ(spec.argv[0], dir_ + "/here");
  // Unset PATH: the usual system directories.
  env_.erase("PATH");
  ASSERT_TRUE(Build({"-np", "1", "sh"}, &spec).ok());
  EXPECT_EQ(spec.argv[0].substr(spec.argv[0].size() - 3), "/sh");
}

TEST_F(JobOptions, RemoteHostsLeaveTheProgramToTheAgent) {
  control::JobSpec spec;
  // Cluster mode with another host: nothing checked here, a bare name stays for the agent's PATH.
  ASSERT_TRUE(
      Build({"-np", "2", "-H", "gpu1:2", "python3-on-gpu1"}, &spec, ProgramCheck::kWhenLocal).ok());
  EXPECT_EQ(spec.argv[0], "python3-on-gpu1");
  ASSERT_TRUE(Build({"-np", "2", "-H", "gpu1:2", "./train"}, &spec, ProgramCheck::kWhenLocal).ok());
  EXPECT_EQ(spec.argv[0], dir_ + "/train");
  // Only this host (or no -H): checked here even in cluster mode.
  EXPECT_HAS(Error({"-np", "2", "-H", "localhost:2", "./train"}, ProgramCheck::kWhenLocal),
             "./train: No such file");
  EXPECT_HAS(Error({"-np", "2", "./train"}, ProgramCheck::kWhenLocal), "./train: No such file");
}

TEST_F(JobOptions, EmbeddedAgent) {
  control::JobSpec spec;
  std::string agent_host;
  int slots = 0;
  ASSERT_TRUE(Build({"-np", "3", "/bin/true"}, &spec).ok());
  ASSERT_TRUE(EmbeddedAgentFor(spec, host_.local_names, "-H", &agent_host, &slots).ok());
  EXPECT_EQ(agent_host, "");
  EXPECT_EQ(slots, 3);
  ASSERT_TRUE(Build({"-np", "2", "-H", "ThisHost:4", "/bin/true"}, &spec).ok());
  ASSERT_TRUE(EmbeddedAgentFor(spec, host_.local_names, "-H", &agent_host, &slots).ok());
  EXPECT_EQ(agent_host, "ThisHost");  // as written, so placement matches -H
  EXPECT_EQ(slots, 4);
  ASSERT_TRUE(Build({"-np", "2", "-H", "localhost:2,127.0.0.2:2", "/bin/true"}, &spec).ok());
  EXPECT_HAS(EmbeddedAgentFor(spec, host_.local_names, "-H", &agent_host, &slots).message(),
             "-H names this host twice (localhost and 127.0.0.2)");
  ASSERT_TRUE(
      Build({"-np", "2", "-H", "localhost:1,far:1", "/bin/true"}, &spec, ProgramCheck::kWhenLocal)
          .ok());
  EXPECT_HAS(EmbeddedAgentFor(spec, host_.local_names, "-H", &agent_host, &slots).message(),
             "-H names far, but without --launcher every rank runs on this host");
}

TEST(LocalHost, Names) {
  const std::vector<std::string> names = LocalHostNames();
  EXPECT_TRUE(IsLocalHost("localhost", names));
  EXPECT_TRUE(IsLocalHost("LOCALHOST", names));
  EXPECT_TRUE(IsLocalHost("127.0.0.1", names));
  EXPECT_TRUE(IsLocalHost("127.1.2.3", names));
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  EXPECT_TRUE(IsLocalHost(buf, names));
  EXPECT_FALSE(IsLocalHost("some-other-host.example", names));
  EXPECT_FALSE(IsLocalHost("10.1.2.3", names));
}

}  // namespace
}  // namespace hvd::cli
