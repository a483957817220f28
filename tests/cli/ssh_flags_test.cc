// hvdrun --ssh's pure parts: quoting, the remote command, and which flag combinations make sense;
// and --ssh-tls-dir's plan, against certificates from scripts/gen-certs.sh.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

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

TEST(RemoteAgentCommand, WithTlsEachAgentGetsItsHostsFilesQuoted) {
  EXPECT_EQ(RemoteAgentCommand("hvd-agent", "head:7070", "gpu2", 4, "/etc/hvd certs/it's"),
            "exec 'hvd-agent' --launcher 'head:7070' --token-file - --stop-on-stdin-eof --host "
            "'gpu2' --slots 4 --tls-cert '/etc/hvd certs/it'\\''s/gpu2.crt' --tls-key "
            "'/etc/hvd certs/it'\\''s/gpu2.key' --tls-ca '/etc/hvd certs/it'\\''s/ca.crt'");
  EXPECT_HAS(RemoteAgentCommand("hvd-agent", "h:1", "gpu2", 1, "/c", true),
             "--tls-ca '/c/ca.crt' --tls-crl '/c/ca.crl'");
  // gen-certs.sh's file names: an IPv6 address's colons become underscores.
  EXPECT_EQ(HostCertBase("/d", "fd00::5"), "/d/fd00__5");
  EXPECT_EQ(HostCertBase("/d", "10.0.0.5"), "/d/10.0.0.5");
}

class SshFlagsTest : public ::testing::Test {
 protected:
  Status Validate(std::vector<std::string> args, bool has_launcher = false, bool hosts = true) {
    control::FlagSet flags("hvdrun");
    SshFlags& f = flags_;
    f = SshFlags();
    f.Register(&flags);
    // ClusterFlags' --tls-* (cli/client.h), which hvdrun registers beside these.
    control::TlsFiles tls;
    flags.String("--tls-cert", &tls.cert, "");
    flags.String("--tls-key", &tls.key, "");
    flags.String("--tls-ca", &tls.ca, "");
    flags.String("--tls-crl", &tls.crl, "");
    args.insert(args.begin(), "hvdrun");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> rest;
    HVD_RETURN_IF_ERROR(flags.Parse(static_cast<int>(argv.size()), argv.data(), 1, true, &rest));
    control::JobSpec spec;
    if (hosts) spec.hosts.push_back({"a", 0});
    return f.Validate(flags, has_launcher, spec, tls);
  }
  SshFlags flags_;
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

TEST_F(SshFlagsTest, TlsFlags) {
  EXPECT_HAS(Validate({"--ssh-tls-dir", "/tmp"}).message(), "--ssh-tls-dir needs --ssh");
  EXPECT_HAS(Validate({"--ssh-launcher-host", "h"}).message(), "--ssh-launcher-host needs --ssh");
  // TLS files without the agents' directory would leave the agents on plain TCP: refused.
  EXPECT_HAS(Validate({"--ssh", "--tls-cert", "/c.crt"}).message(),
             "--tls-cert with --ssh needs --ssh-tls-dir DIR: where the agents' certificates are");
  EXPECT_HAS(Validate({"--ssh", "--tls-ca", "/ca.crt"}).message(), "--tls-ca with --ssh needs");
  EXPECT_HAS(Validate({"--ssh", "--tls-crl", "/ca.crl"}).message(), "--tls-crl with --ssh needs");
  EXPECT_HAS(Validate({"--ssh", "--ssh-tls-dir", "/nonexistent/certs"}).message(),
             "--ssh-tls-dir /nonexistent/certs: no such directory here; make it with "
             "scripts/gen-certs.sh --out /nonexistent/certs");
  // Relative: made absolute, as the agents read the same path on their hosts.
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir("/"), 0);
  Status s = Validate({"--ssh", "--ssh-tls-dir", "tmp", "--tls-ca", "/x.crt"});
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(flags_.tls_dir, "/tmp");
  EXPECT_EQ(flags_.launcher_tls.ca, "/x.crt");
  EXPECT_EQ(flags_.launcher_tls.cert, "");  // only what the command line gave
}

// PlanSshTls against gen-certs.sh's output: the launcher's certificate is the first name that has
// one, and the agents dial that name.
class SshTlsPlanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hvd_ssh_tls_plan.XXXXXX";
    dir_ = new std::string(mkdtemp(tmpl));
    const std::string cmd = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh --out " + *dir_ +
                            "/a --hosts head,10.0.0.5,node1 2>/dev/null && " + HVD_SOURCE_DIR +
                            "/scripts/gen-certs.sh --out " + *dir_ + "/b --hosts head 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    (void)!std::system(("rm -rf '" + *dir_ + "'").c_str());
    delete dir_;
  }
  static SshFlags Flags(const std::string& sub) {
    SshFlags f;
    f.enabled = true;
    f.tls_dir = *dir_ + "/" + sub;
    return f;
  }
  static std::string* dir_;
};
std::string* SshTlsPlanTest::dir_ = nullptr;

TEST_F(SshTlsPlanTest, WithoutADirPlainTcpAtTheFirstName) {
  SshTlsPlan plan;
  ASSERT_TRUE(PlanSshTls(SshFlags(), {"10.1.1.1", "head"}, &plan).ok());
  EXPECT_FALSE(plan.enabled);
  EXPECT_FALSE(plan.launcher.enabled());
  EXPECT_FALSE(plan.client.enabled());
  EXPECT_EQ(plan.launcher_host, "10.1.1.1");
}

TEST_F(SshTlsPlanTest, TheFirstNameWithACertificate) {
  SshTlsPlan plan;
  Status s = PlanSshTls(Flags("a"), {"10.1.1.1", "head"}, &plan);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(plan.enabled);
  EXPECT_EQ(plan.launcher_host, "head");  // the name its certificate has
  EXPECT_FALSE(plan.launcher.cert_pem.empty());
  EXPECT_FALSE(plan.launcher.ca_pem.empty());
  EXPECT_EQ(plan.client.ca_pem, plan.launcher.ca_pem);
  EXPECT_TRUE(plan.client.cert_pem.empty());  // hvdrun authenticates with the token
  // gen-certs.sh's ca.crl: checked by every side.
  EXPECT_TRUE(plan.agents_crl);
  EXPECT_FALSE(plan.launcher.crl_pem.empty());
  EXPECT_FALSE(plan.client.crl_pem.empty());
  ASSERT_TRUE(PlanSshTls(Flags("a"), {"10.0.0.5", "head"}, &plan).ok());
  EXPECT_EQ(plan.launcher_host, "10.0.0.5");
  // A directory without ca.crl (a site PKI's): no revocation check, as without --tls-crl.
  ASSERT_EQ(std::system(
                ("cp -r '" + *dir_ + "/a' '" + *dir_ + "/nocrl' && rm '" + *dir_ + "/nocrl/ca.crl'")
                    .c_str()),
            0);
  s = PlanSshTls(Flags("nocrl"), {"head"}, &plan);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(plan.agents_crl);
  EXPECT_TRUE(plan.launcher.crl_pem.empty());
}

TEST_F(SshTlsPlanTest, NoCertificateForThisMachineSaysWhereItLooked) {
  SshTlsPlan plan;
  const std::string d = *dir_ + "/a";
  Status s = PlanSshTls(Flags("a"), {"10.1.1.1", "other"}, &plan);
  EXPECT_HAS(s.message(), "--ssh-tls-dir " + d + ": no certificate for the launcher on this " +
                              "machine (looked for " + d + "/10.1.1.1.crt, " + d +
                              "/other.crt); make one with scripts/gen-certs.sh --out " + d +
                              " --hosts 10.1.1.1");
  EXPECT_FALSE(plan.enabled);
}

TEST_F(SshTlsPlanTest, ExplicitFilesAndTheirChecks) {
  SshFlags f = Flags("a");
  f.launcher_tls.cert = *dir_ + "/a/node1.crt";
  f.launcher_tls.key = *dir_ + "/a/node1.key";
  SshTlsPlan plan;
  Status s = PlanSshTls(f, {"10.1.1.1"}, &plan);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(plan.launcher_host, "10.1.1.1");  // --ssh-launcher-host's business, not guessed
  // Another CA's certificate with DIR's ca.crt: LoadTls's own check, named as the launcher's.
  f.launcher_tls.cert = *dir_ + "/b/head.crt";
  f.launcher_tls.key = *dir_ + "/b/head.key";
  s = PlanSshTls(f, {"head"}, &plan);
  EXPECT_HAS(s.message(), "--ssh-tls-dir: the launcher in hvdrun: ");
  EXPECT_HAS(s.message(), *dir_ + "/b/head.crt");
  // A missing CA file.
  f = Flags("b");
  f.launcher_tls.ca = *dir_ + "/nope.crt";
  s = PlanSshTls(f, {"head"}, &plan);
  EXPECT_HAS(s.message(), *dir_ + "/nope.crt");
}

}  // namespace
}  // namespace hvd::cli
