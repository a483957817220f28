// hvdrun --ssh's pure parts: quoting, the remote command, and which flag combinations make sense.
#include <gtest/gtest.h>

#include "cli/ssh_cluster.h"
#include "cli/ssh_session.h"
#include "testutil/expect.h"

namespace hvd::cli {
namespace {

TEST(ShellQuote, SingleQuotesSurviveAShell) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b;$(rm -rf /)"), "'a b;$(rm -rf /)'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
}

TEST(RemoteAgentCommand, ExecsTheAgentWithTheTokenOnStdin) {
  EXPECT_EQ(RemoteAgentCommand("/opt/hvd/bin/hvd-agent", "10.0.0.5:7070", "gpu2", 4),
            "exec '/opt/hvd/bin/hvd-agent' --launcher '10.0.0.5:7070' --token-file - "
            "--stop-on-stdin-eof --host 'gpu2' --slots 4");
}

class SshFlagsTest : public ::testing::Test {
 protected:
  Status Validate(std::vector<std::string> args, bool has_launcher = false, bool hosts = true) {
    control::FlagSet flags("hvdrun");
    SshFlags f;
    f.Register(&flags);
    args.insert(args.begin(), "hvdrun");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> rest;
    HVD_RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &rest));
    control::JobSpec spec;
    if (hosts) spec.hosts.push_back({"a", 0});
    return f.Validate(flags, has_launcher, spec);
  }
};

TEST_F(SshFlagsTest, Combinations) {
  EXPECT_TRUE(Validate({}).ok());
  EXPECT_TRUE(Validate({"--ssh", "-p", "2222", "-i", "/k", "--ssh-user", "u"}).ok());
  // Named as typed (horovodrun's -p and -i), with what to do.
  EXPECT_HAS(Validate({"-p", "2222"}).message(),
             "-p needs --ssh: add --ssh to start agents on the -H hosts over SSH, or drop -p when "
             "agents already run there (--launcher HOST:PORT)");
  EXPECT_HAS(Validate({"--ssh-identity", "/k"}).message(), "--ssh-identity needs --ssh");
  EXPECT_HAS(Validate({"--ssh"}, true).message(), "drop --launcher");
  EXPECT_HAS(Validate({"--ssh"}, false, false).message(), "--ssh needs the hosts");
  EXPECT_HAS(Validate({"--ssh", "-p", "70000"}).message(), "--ssh-port must be 1..65535");
  EXPECT_HAS(Validate({"--ssh", "--ssh-timeout", "0"}).message(), "--ssh-timeout must be 1..600");
  EXPECT_HAS(Validate({"--ssh", "--ssh-agent-path", ""}).message(), "--ssh-agent-path is empty");
}

}  // namespace
}  // namespace hvd::cli
