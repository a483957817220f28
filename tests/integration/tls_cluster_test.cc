// TLS end to end (docs/security.md, "TLS"), with real processes on 127.0.0.1 and certificates
// from scripts/gen-certs.sh (made once for the binary): hvd-launcherd, an hvd-agent over mutual
// TLS and hvdrun run a job; REST answers over HTTPS; an agent without a client certificate, or
// with one from another CA, and hvdrun with the wrong CA or none are refused with messages that
// say which flag to fix. With --tls-crl (TlsCrlClusterTest) an agent whose certificate was
// revoked (gen-certs.sh --revoke) is refused, and a good one still runs a job.
#include <httplib.h>

#include <grpcpp/grpcpp.h>

#include "control/grpc_util.h"
#include "control/tls.h"
#include "hvd/v1/agent.grpc.pb.h"
#include "tests/integration/cluster_harness.h"

namespace hvd::integrationtest {
namespace {

class TlsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hvd_tls_cluster_test.XXXXXX";
    certs_ = new std::string(mkdtemp(tmpl));
    const std::string gen = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh";
    const std::string cmd = gen + " --out " + *certs_ +
                            "/a --hosts 127.0.0.1,node-b,node-r 2>/dev/null && " + gen + " --out " +
                            *certs_ + "/a --revoke node-r 2>/dev/null && " + gen + " --out " +
                            *certs_ + "/b --hosts node-x 2>/dev/null && cat " + *certs_ +
                            "/a/ca.crt " + *certs_ + "/b/ca.crt > " + *certs_ + "/both.crt";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  static void TearDownTestSuite() {
    (void)!std::system(("rm -rf '" + *certs_ + "'").c_str());
    delete certs_;
  }
  static std::string C(const std::string& name) { return *certs_ + "/" + name; }

  void SetUp() override {
    marker_ = "hvd-tls-" + std::to_string(getpid()) + "-" + RandomHex(8);
    token_ = RandomHex(32);
    WriteTokenFile(dir_ / "token", token_);
    const int grpc_port = FreePort(), http_port = FreePort();
    ASSERT_GT(grpc_port, 0);
    ASSERT_GT(http_port, 0);
    grpc_ = "127.0.0.1:" + std::to_string(grpc_port);
    http_port_ = http_port;
    std::vector<std::string> argv(
        {HVD_LAUNCHERD_PATH, "--listen", grpc_, "--rendezvous-listen", "127.0.0.1:0", "--http",
         "127.0.0.1:" + std::to_string(http_port), "--token-file", dir_ / "token",
         "--kill-grace-ms", "2000", "--heartbeat-interval-ms", "500", "--tls-cert",
         C("a/127.0.0.1.crt"), "--tls-key", C("a/127.0.0.1.key"), "--tls-ca", C("a/ca.crt")});
    if (crl_) argv.insert(argv.end(), {"--tls-crl", C("a/ca.crl")});
    launcher_ = Start(argv);
    // Its start line says TLS is on, for gRPC, the rendezvous and REST.
    const std::string want = "hvd-launcherd: gRPC " + grpc_ + " (TLS), rendezvous hvds://";
    ASSERT_TRUE(
        WaitFor([&] { return launcher_->Out().find(want) != std::string::npos; }, kStartTimeout))
        << launcher_->Out() << launcher_->Err();
    ASSERT_NE(launcher_->Out().find(", HTTPS 127.0.0.1:"), std::string::npos) << launcher_->Out();
  }

  void TearDown() override {
    for (auto* p : {&agent_, &launcher_}) {
      if (!*p) continue;
      (*p)->Signal(SIGTERM);
      ProcResult r = (*p)->Wait(kStopTimeout);
      EXPECT_FALSE(r.timed_out) << r.err;
      EXPECT_EQ(r.exit_code, 0) << r.err;
    }
    EXPECT_EQ(clitest::Leftovers(), std::vector<std::string>{});
    std::vector<std::string> marked;
    WaitFor([&] { return (marked = ProcessesMarked(marker_)).empty(); }, seconds(3));
    EXPECT_EQ(marked, std::vector<std::string>{}) << "processes of this test survived it";
  }

  std::unique_ptr<Proc> Start(const std::vector<std::string>& argv) {
    return std::make_unique<Proc>(
        argv, dir_.path(),
        std::vector<std::string>{"HVD_IT_MARKER=" + marker_, "HVD_LAUNCHER=", "HVD_TOKEN_FILE=",
                                 "HVD_TLS_CA=", "HVD_TLS_CERT=", "HVD_TLS_KEY=", "HVD_TLS_CRL="},
        dir_.path());
  }

  std::unique_ptr<Proc> StartAgent(const std::string& host, const std::string& cert,
                                   const std::string& key, const std::string& ca,
                                   const std::vector<std::string>& more = {}) {
    std::vector<std::string> argv({HVD_AGENT_PATH, "--launcher", grpc_, "--token-file",
                                   dir_ / "token", "--slots", "2", "--host", host, "--tls-cert",
                                   cert, "--tls-key", key, "--tls-ca", ca});
    argv.insert(argv.end(), more.begin(), more.end());
    return Start(argv);
  }

  // GET https://127.0.0.1:port/path, verifying the launcher against the cluster CA.
  httplib::Result Https(const std::string& path, const std::string& ca) {
    httplib::SSLClient client("127.0.0.1", http_port_);
    client.set_ca_cert_path(ca.c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5);
    client.set_read_timeout(5);
    client.set_bearer_token_auth(token_.c_str());
    return client.Get(path.c_str());
  }

  std::string AgentsJson() {
    httplib::Result r = Https("/v1/agents", C("a/ca.crt"));
    return r && r->status == 200 ? r->body : "";
  }

  ProcResult Hvdrun(const std::vector<std::string>& args) {
    std::vector<std::string> a = {HVDRUN_PATH, "--launcher", grpc_, "--token-file", dir_ / "token"};
    a.insert(a.end(), args.begin(), args.end());
    return Start(a)->Wait(kCommandTimeout);
  }

  static std::string* certs_;
  bool crl_ = false;  // the launcher gets --tls-crl a/ca.crl
  TempDir dir_;
  std::string marker_, token_, grpc_;
  int http_port_ = 0;
  std::unique_ptr<Proc> launcher_, agent_;
};
std::string* TlsClusterTest::certs_ = nullptr;

class TlsCrlClusterTest : public TlsClusterTest {
 protected:
  void SetUp() override {
    crl_ = true;
    TlsClusterTest::SetUp();
  }
};

TEST_F(TlsClusterTest, MutualTlsRunsAJobAndRestAnswersOverHttps) {
  httplib::Result health = Https("/healthz", C("a/ca.crt"));
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");

  agent_ = StartAgent("node-b", C("a/node-b.crt"), C("a/node-b.key"), C("a/ca.crt"));
  ASSERT_TRUE(
      WaitFor([&] { return AgentsJson().find("\"READY\"") != std::string::npos; }, kStartTimeout))
      << AgentsJson() << "\nagent stderr: " << agent_->Err();

  // Real ranks: hvd::Init meets over the TLS rendezvous (hvds://, the agent's CA), then
  // allreduces.
  ProcResult run = Hvdrun({"--tls-ca", C("a/ca.crt"), "-x", "HVD_IT_MARKER", "-np", "2", "sh", "-c",
                           "echo rank-$HVD_RANK-at-${HVD_RENDEZVOUS%%:*}; exec " +
                               std::string(FAULT_WORKER_PATH) + " --steps 3"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("rank-0-at-hvds"), std::string::npos) << run.out << run.err;
  EXPECT_NE(run.out.find("rank-1-at-hvds"), std::string::npos) << run.out << run.err;
  EXPECT_NE(run.out.find("rank 0 done"), std::string::npos) << run.out << run.err;
  EXPECT_NE(run.out.find("rank 1 done"), std::string::npos) << run.out << run.err;

  // The environment variables do what the flags do.
  std::unique_ptr<Proc> list = std::make_unique<Proc>(
      std::vector<std::string>{HVDRUN_PATH, "list", "--launcher", grpc_, "--token-file",
                               dir_ / "token"},
      dir_.path(),
      std::vector<std::string>{"HVD_IT_MARKER=" + marker_, "HVD_TLS_CA=" + C("a/ca.crt")},
      dir_.path());
  ProcResult listed = list->Wait(kCommandTimeout);
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
}

TEST_F(TlsClusterTest, HvdrunWithTheWrongCaOrNoneIsToldWhichFlag) {
  ProcResult wrong = Hvdrun({"list", "--tls-ca", C("b/ca.crt")});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("certificate verify failed"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("--tls-ca must be the CA that signed the launcher's certificate"),
            std::string::npos)
      << wrong.err;
  ProcResult plain = Hvdrun({"list"});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_NE(plain.err.find("pass --tls-ca"), std::string::npos) << plain.err;
  // An unreadable file is a usage error naming the flag, before any connection.
  ProcResult missing = Hvdrun({"list", "--tls-ca", dir_ / "nope.crt"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--tls-ca " + dir_ / "nope.crt" + ": cannot read"), std::string::npos)
      << missing.err;
  // HTTPS with a CA that did not sign the launcher's certificate fails the handshake.
  EXPECT_FALSE(Https("/healthz", C("b/ca.crt")));
}

TEST_F(TlsClusterTest, AgentWithACertificateOfAnotherCaIsRefused) {
  // Its --tls-ca holds both CAs, so the agent itself trusts the launcher and gets as far as the
  // launcher's check of its certificate.
  agent_ = StartAgent("node-x", C("b/node-x.crt"), C("b/node-x.key"), C("both.crt"));
  ASSERT_TRUE(WaitFor(
      [&] {
        return agent_->Err().find("the launcher closed the TLS connection") != std::string::npos;
      },
      seconds(10)))
      << agent_->Err();
  EXPECT_NE(agent_->Err().find("signed by the CA the launcher was given (its --tls-ca)"),
            std::string::npos);
  EXPECT_NE(launcher_->Err().find("certificate verify failed"), std::string::npos)
      << launcher_->Err();
  EXPECT_EQ(AgentsJson().find("node-x"), std::string::npos) << AgentsJson();
}

TEST_F(TlsClusterTest, AgentWithoutAClientCertificateIsRefused) {
  // hvd-agent refuses to start so (LoadTls); a client that skips that check and connects with the
  // CA only (as hvdrun does) is refused by the AgentGateway, with the token right.
  control::TlsConfig client_tls;
  ASSERT_TRUE(
      control::LoadTls({"", "", C("a/ca.crt")}, control::TlsRole::kClient, &client_tls).ok());
  auto stub = v1::AgentGateway::NewStub(control::NewChannel(grpc_, client_tls));
  auto ctx = control::NewClientContext(token_, seconds(5));
  auto stream = stub->Connect(ctx.get());
  v1::AgentMessage reg;
  reg.mutable_register_()->set_host("no-cert");
  reg.mutable_register_()->set_slots(1);
  stream->Write(reg);
  stream->WritesDone();
  v1::LauncherMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("start hvd-agent with --tls-cert and --tls-key"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(AgentsJson().find("no-cert"), std::string::npos);

  ProcResult no_cert = Start({HVD_AGENT_PATH, "--launcher", grpc_, "--token-file", dir_ / "token",
                              "--tls-ca", C("a/ca.crt")})
                           ->Wait(kCommandTimeout);
  EXPECT_EQ(no_cert.exit_code, 2);
  EXPECT_NE(no_cert.err.find("TLS needs --tls-cert and --tls-key"), std::string::npos)
      << no_cert.err;
}

TEST_F(TlsCrlClusterTest, RevokedAgentIsRefusedAndAGoodOneRunsAJob) {
  // node-r's certificate was revoked (gen-certs.sh --revoke). Started without the CRL it does not
  // know that, connects, and the launcher refuses it in the handshake.
  std::unique_ptr<Proc> revoked =
      StartAgent("node-r", C("a/node-r.crt"), C("a/node-r.key"), C("a/ca.crt"));
  // (TLS 1.3: the agent hears the connection closed; 1.2 would bring the "revoked" alert.)
  ASSERT_TRUE(WaitFor(
      [&] {
        return revoked->Err().find("the launcher closed the TLS connection") != std::string::npos ||
               revoked->Err().find("as revoked") != std::string::npos;
      },
      seconds(10)))
      << revoked->Err();
  EXPECT_TRUE(WaitFor(
      [&] { return launcher_->Err().find("verify failed with code 23") != std::string::npos; },
      seconds(5)))
      << launcher_->Err();
  EXPECT_NE(launcher_->Err().find("checked against --tls-crl (1 revoked)"), std::string::npos)
      << launcher_->Err();
  EXPECT_TRUE(revoked->Err().find("if the launcher has --tls-crl, not revoked") !=
                  std::string::npos ||
              revoked->Err().find("as revoked") != std::string::npos)
      << revoked->Err();
  revoked->Signal(SIGTERM);
  EXPECT_FALSE(revoked->Wait(kStopTimeout).timed_out);
  // Given the CRL, it says so itself before connecting.
  ProcResult self = StartAgent("node-r", C("a/node-r.crt"), C("a/node-r.key"), C("a/ca.crt"),
                               {"--tls-crl", C("a/ca.crl")})
                        ->Wait(kCommandTimeout);
  EXPECT_EQ(self.exit_code, 2);
  EXPECT_NE(self.err.find("is revoked by --tls-crl " + C("a/ca.crl")), std::string::npos)
      << self.err;

  // --tls-crl on every side, certificates not revoked: as without it.
  agent_ = StartAgent("node-b", C("a/node-b.crt"), C("a/node-b.key"), C("a/ca.crt"),
                      {"--tls-crl", C("a/ca.crl")});
  ASSERT_TRUE(
      WaitFor([&] { return AgentsJson().find("\"READY\"") != std::string::npos; }, kStartTimeout))
      << AgentsJson() << "\nagent stderr: " << agent_->Err();
  EXPECT_EQ(AgentsJson().find("node-r"), std::string::npos) << AgentsJson();
  ProcResult run = Hvdrun({"--tls-ca", C("a/ca.crt"), "--tls-crl", C("a/ca.crl"), "-x",
                           "HVD_IT_MARKER", "-np", "2", "sh", "-c", "echo rank-$HVD_RANK-crl"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("rank-1-crl"), std::string::npos) << run.out << run.err;

  // The AgentGateway still wants a client certificate on these (experimental TLS) credentials.
  control::TlsConfig no_cert;
  ASSERT_TRUE(
      control::LoadTls({"", "", C("a/ca.crt"), C("a/ca.crl")}, control::TlsRole::kClient, &no_cert)
          .ok());
  auto stub = v1::AgentGateway::NewStub(control::NewChannel(grpc_, no_cert));
  auto ctx = control::NewClientContext(token_, seconds(5));
  auto stream = stub->Connect(ctx.get());
  stream->WritesDone();
  v1::LauncherMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  grpc::Status st = stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
}

}  // namespace
}  // namespace hvd::integrationtest
