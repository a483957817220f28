// FlagSet's parts beyond plain flags: refused flags, aliases, repeatable lists, --help groups and
// a config file whose entries set the flags the command line did not give.
#include "control/flags.h"

#include <gtest/gtest.h>

#include "testutil/expect.h"

namespace hvd::control {
namespace {

Status Parse(FlagSet* flags, std::vector<std::string> args,
             std::vector<std::string>* positional = nullptr) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<std::string> ignored;
  return flags->Parse(static_cast<int>(argv.size()), argv.data(), 1, true,
                      positional != nullptr ? positional : &ignored);
}

TEST(FlagSet, RefusedFlagSaysWhatInstead) {
  FlagSet flags("prog");
  bool v = false;
  flags.Bool("--verbose", &v, "talk");
  flags.Refused("--autotune,--autotune-log-file", "FILE", "no autotuning; instead, set X");
  Status s = Parse(&flags, {"--autotune-log-file", "f.csv", "./train"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "prog: --autotune-log-file: no autotuning; instead, set X");
  s = Parse(&flags, {"--autotune=1"});
  EXPECT_EQ(s.message(), "prog: --autotune: no autotuning; instead, set X");
  // After the program, it is the program's.
  std::vector<std::string> pos;
  EXPECT_TRUE(Parse(&flags, {"./train", "--autotune"}, &pos).ok());
  EXPECT_EQ(pos, (std::vector<std::string>{"./train", "--autotune"}));
}

TEST(FlagSet, AliasAndGivenAs) {
  FlagSet flags("prog");
  std::string hostfile;
  flags.String("--hostfile", &hostfile, "hosts");
  flags.Alias("--hostfile", "-hostfile");
  ASSERT_TRUE(Parse(&flags, {"-hostfile", "h.txt"}).ok());
  EXPECT_EQ(hostfile, "h.txt");
  EXPECT_TRUE(flags.Given("--hostfile"));
  EXPECT_EQ(flags.GivenAs("--hostfile"), "-hostfile");
  EXPECT_HAS(flags.Usage("x"), "--hostfile, -hostfile VALUE");
}

TEST(FlagSet, StringListJoinsRepeatedValues) {
  FlagSet flags("prog");
  std::string nics = "default";
  flags.StringList("--network-interface,--network-interfaces", &nics, "nics");
  ASSERT_TRUE(
      Parse(&flags, {"--network-interfaces", "eth0,eth1", "--network-interface", "ib0"}).ok());
  EXPECT_EQ(nics, "eth0,eth1,ib0");  // the default is replaced, later values appended
}

TEST(FlagSet, PairTakesTwoValues) {
  FlagSet flags("tool");
  std::string range;
  flags.Pair("--range", &range, "MIN MAX");
  std::vector<std::string> rest;
  std::vector<std::string> args = {"tool", "--range", "10", "100", "prog"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  ASSERT_TRUE(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &rest).ok());
  EXPECT_EQ(range, "10,100");
  EXPECT_EQ(rest, std::vector<std::string>{"prog"});
  FlagSet again("tool");
  again.Pair("--range", &range, "MIN MAX");
  std::vector<std::string> short_args = {"tool", "--range", "10"};
  std::vector<char*> argv2;
  for (std::string& a : short_args) argv2.push_back(a.data());
  Status s = again.Parse(static_cast<int>(argv2.size()), argv2.data(), 1, true, &rest);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("flag --range needs two values"), std::string::npos) << s.message();
}

TEST(FlagSet, GroupsAreListedAfterTheUngroupedFlags) {
  FlagSet flags("prog");
  bool a = false, b = false, c = false;
  flags.Bool("--alpha", &a, "first");
  flags.Group("compatibility");
  flags.Bool("--beta", &b, "grouped");
  flags.Refused("--gamma", "N", "not here; instead, use --alpha");
  flags.Group("");
  flags.Bool("--delta", &c, "ungrouped again");
  const std::string u = flags.Usage("x");
  const size_t alpha = u.find("--alpha"), delta = u.find("--delta"),
               group = u.find("compatibility:"), beta = u.find("--beta");
  ASSERT_NE(group, std::string::npos) << u;
  EXPECT_LT(alpha, delta);
  EXPECT_LT(delta, group);
  EXPECT_LT(group, beta);
  EXPECT_HAS(u, "--gamma N");
  EXPECT_HAS(u, "not in hvd: not here; instead, use --alpha");
}

class ConfigFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    flags_.Int("--cache", &cache_, "cache");
    flags_.Bool("--on", &on_, "switch on");
    flags_.Bool("--off", &off_, "switch off");
    flags_.Refused("--autotune", "", "no autotuning; instead, tune by hand");
    flags_.ConfigFile(
        "--config-file", &path_,
        [this](const std::string& path, std::vector<FlagSet::ConfigEntry>* out) -> Status {
          loaded_ = path;
          *out = entries_;
          return Status::OK();
        },
        "config");
  }
  FlagSet flags_{"prog"};
  int64_t cache_ = 0;
  bool on_ = false, off_ = false;
  std::string path_, loaded_;
  std::vector<FlagSet::ConfigEntry> entries_;
};

TEST_F(ConfigFlags, EntriesSetFlagsTheCommandLineDidNotGive) {
  entries_ = {{"--cache", "64", "c.yaml:2", {}}, {"--on", "true", "c.yaml:3", {"--on", "--off"}}};
  ASSERT_TRUE(Parse(&flags_, {"--config-file", "c.yaml"}).ok());
  EXPECT_EQ(loaded_, "c.yaml");
  EXPECT_EQ(cache_, 64);
  EXPECT_TRUE(on_);
  EXPECT_TRUE(flags_.Given("--cache"));
  EXPECT_EQ(flags_.GivenAs("--cache"), "c.yaml:2 (--cache)");
  EXPECT_TRUE(flags_.FromConfig("--cache"));
  EXPECT_FALSE(flags_.FromConfig("--off"));  // not given at all
}

TEST_F(ConfigFlags, FromConfigTellsTheFileFromTheCommandLine) {
  entries_ = {{"--cache", "64", "c.yaml:2", {}}, {"--on", "true", "c.yaml:3", {}}};
  ASSERT_TRUE(Parse(&flags_, {"--cache", "8", "--config-file", "c.yaml"}).ok());
  EXPECT_FALSE(flags_.FromConfig("--cache"));  // the command line's 8
  EXPECT_TRUE(flags_.FromConfig("--on"));
}

TEST_F(ConfigFlags, TheCommandLineWinsWhereverItIs) {
  entries_ = {{"--cache", "64", "c.yaml:2", {}}, {"--on", "true", "c.yaml:3", {"--on", "--off"}}};
  // Before and after --config-file alike, as horovodrun's parser does.
  ASSERT_TRUE(Parse(&flags_, {"--cache", "8", "--config-file", "c.yaml", "--off"}).ok());
  EXPECT_EQ(cache_, 8);
  EXPECT_FALSE(on_);  // overridden by --off, its opposite
  EXPECT_TRUE(off_);
}

TEST_F(ConfigFlags, BadEntriesNameFileAndLine) {
  entries_ = {{"--cache", "lots", "c.yaml:7", {}}};
  Status s = Parse(&flags_, {"--config-file", "c.yaml"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_HAS(s.message(), "prog: c.yaml:7: flag --cache: 'lots'");
  entries_ = {{"--autotune", "true", "c.yaml:4", {}}};
  s = Parse(&flags_, {"--config-file", "c.yaml"});
  EXPECT_EQ(s.message(), "prog: c.yaml:4: --autotune: no autotuning; instead, tune by hand");
  entries_ = {{"--nope", "1", "c.yaml:5", {}}};
  s = Parse(&flags_, {"--config-file", "c.yaml"});
  EXPECT_HAS(s.message(), "c.yaml:5: --nope is not a flag of prog");
}

TEST_F(ConfigFlags, NoFileNoLoad) {
  entries_ = {{"--cache", "64", "c.yaml:2", {}}};
  ASSERT_TRUE(Parse(&flags_, {"--on"}).ok());
  EXPECT_EQ(loaded_, "");
  EXPECT_EQ(cache_, 0);
}

}  // namespace
}  // namespace hvd::control
