// control/tls.h: each wrong --tls-* file is refused naming the flag, the path and what is wrong,
// before gRPC sees it. Certificates come from scripts/gen-certs.sh (once for the binary), the
// expired one and the expired CRL from `openssl ca` with dates in the past. At the end, the
// credentials of tls_grpc.h with --tls-crl in one process: a revoked client certificate fails
// the handshake, a good one passes, and the launcher's host name is still verified.
#include "control/tls.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <string>

#include "control/grpc_util.h"
#include "control/tls_crl.h"
#include "control/tls_grpc.h"
#include "hvd/v1/launcher.grpc.pb.h"

namespace hvd::control {
namespace {

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hvd_tls_files_test.XXXXXX";
    dir_ = new std::string(mkdtemp(tmpl));
    const std::string d = *dir_;
    const std::string gen = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh";
    // The cluster (node-r revoked), another CA, and a certificate and a CRL of the cluster CA
    // that expired in 2020.
    const std::string script =
        gen + " --out " + d + "/a --hosts 127.0.0.1,node-b,node-r 2>/dev/null && " + gen +
        " --out " + d + "/a --revoke node-r 2>/dev/null && " + gen + " --out " + d +
        "/b --hosts 127.0.0.1 2>/dev/null && cd " + d +
        " && touch index.txt && echo 01 > serial && printf '[ca]\\ndefault_ca=x\\n[x]\\n"
        "database=index.txt\\nnew_certs_dir=.\\npolicy=p\\ndefault_md=sha256\\nserial=serial\\n"
        "[p]\\ncommonName=supplied\\n' > ca.cnf && openssl req -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -keyout old.key -out old.csr -subj /CN=old "
        "2>/dev/null && openssl ca -batch -config ca.cnf -cert a/ca.crt -keyfile a/ca.key -in "
        "old.csr -out old.crt -startdate 20200101000000Z -enddate 20200102000000Z -notext "
        ">/dev/null 2>&1 && openssl ca -batch -config ca.cnf -cert a/ca.crt -keyfile a/ca.key "
        "-gencrl -crl_lastupdate 20200101000000Z -crl_nextupdate 20200102000000Z -out old.crl "
        ">/dev/null 2>&1 && echo 'not a certificate' > junk.pem";
    ASSERT_EQ(std::system(("bash -c \"" + Escape(script) + "\"").c_str()), 0) << script;
  }
  static void TearDownTestSuite() {
    (void)!std::system(("rm -rf '" + *dir_ + "'").c_str());
    delete dir_;
  }
  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\' || c == '$') out += '\\';
      out += c;
    }
    return out;
  }
  static std::string P(const std::string& name) { return *dir_ + "/" + name; }
  // `openssl x509 -subject_hash` of a certificate file.
  static std::string Hash(const std::string& cert) {
    std::string out;
    FILE* p = popen(("openssl x509 -noout -subject_hash -in '" + cert + "'").c_str(), "r");
    char buf[64];
    while (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) out += buf;
    if (p != nullptr) pclose(p);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  static Status Load(const TlsFiles& f, TlsRole role, TlsConfig* out = nullptr) {
    TlsConfig ignored;
    return LoadTls(f, role, out != nullptr ? out : &ignored);
  }

  static std::string* dir_;
};
std::string* TlsFilesTest::dir_ = nullptr;

TEST_F(TlsFilesTest, NothingGivenIsPlainTcp) {
  TlsConfig cfg;
  ASSERT_TRUE(Load({}, TlsRole::kServer, &cfg).ok());
  EXPECT_FALSE(cfg.enabled());
}

TEST_F(TlsFilesTest, GoodFilesLoadForEveryRole) {
  TlsConfig cfg;
  const TlsFiles full{P("a/node-b.crt"), P("a/node-b.key"), P("a/ca.crt")};
  ASSERT_TRUE(Load(full, TlsRole::kServer, &cfg).ok());
  EXPECT_TRUE(cfg.enabled());
  EXPECT_NE(cfg.key_pem.find("PRIVATE KEY"), std::string::npos);
  ASSERT_TRUE(Load(full, TlsRole::kAgent).ok());
  Status s = Load({"", "", P("a/ca.crt")}, TlsRole::kClient, &cfg);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(cfg.enabled());
  EXPECT_TRUE(cfg.cert_pem.empty());
}

TEST_F(TlsFilesTest, MissingFlagsForTheRoleAreNamed) {
  Status s = Load({P("a/node-b.crt"), P("a/node-b.key"), ""}, TlsRole::kServer);
  EXPECT_NE(s.message().find("--tls-ca"), std::string::npos) << s.message();
  s = Load({"", "", P("a/ca.crt")}, TlsRole::kAgent);
  EXPECT_NE(s.message().find("--tls-cert and --tls-key"), std::string::npos) << s.message();
  s = Load({P("a/node-b.crt"), "", P("a/ca.crt")}, TlsRole::kClient);
  EXPECT_NE(s.message().find("give both or neither"), std::string::npos) << s.message();
}

TEST_F(TlsFilesTest, UnreadableFileNamesFlagPathAndReason) {
  Status s = Load({P("a/nope.crt"), P("a/node-b.key"), P("a/ca.crt")}, TlsRole::kServer);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-cert " + P("a/nope.crt") + ": cannot read: No such file"),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, NotPemIsRefused) {
  Status s = Load({P("junk.pem"), P("a/node-b.key"), P("a/ca.crt")}, TlsRole::kServer);
  EXPECT_NE(s.message().find("--tls-cert " + P("junk.pem") + ": no PEM certificate"),
            std::string::npos)
      << s.message();
  s = Load({"", "", P("junk.pem")}, TlsRole::kClient);
  EXPECT_NE(s.message().find("--tls-ca " + P("junk.pem") + ": no PEM certificate"),
            std::string::npos)
      << s.message();
  s = Load({P("a/node-b.crt"), P("a/ca.crt"), P("a/ca.crt")}, TlsRole::kServer);  // cert as key
  EXPECT_NE(s.message().find("--tls-key " + P("a/ca.crt") + ": no unencrypted PEM private key"),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, KeyOfAnotherCertificateIsRefused) {
  Status s = Load({P("a/node-b.crt"), P("a/127.0.0.1.key"), P("a/ca.crt")}, TlsRole::kAgent);
  EXPECT_NE(s.message().find("--tls-key " + P("a/127.0.0.1.key") + " does not match --tls-cert " +
                             P("a/node-b.crt")),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, ExpiredCertificateIsRefused) {
  Status s = Load({P("old.crt"), P("old.key"), P("a/ca.crt")}, TlsRole::kAgent);
  EXPECT_NE(s.message().find("--tls-cert " + P("old.crt") +
                             ": the certificate (/CN=old) has "
                             "expired"),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, CertificateOfAnotherCaIsRefused) {
  Status s = Load({P("b/127.0.0.1.crt"), P("b/127.0.0.1.key"), P("a/ca.crt")}, TlsRole::kAgent);
  EXPECT_NE(s.message().find("does not verify against --tls-ca " + P("a/ca.crt")),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, KeyReadableByOthersIsRefused) {
  const std::string copy = P("loose.key");
  ASSERT_EQ(std::system(("cp " + P("a/node-b.key") + " " + copy + " && chmod 640 " + copy).c_str()),
            0);
  Status s = Load({P("a/node-b.crt"), copy, P("a/ca.crt")}, TlsRole::kAgent);
  EXPECT_NE(s.message().find("--tls-key " + copy +
                             " is accessible by group or others; run: "
                             "chmod 600"),
            std::string::npos)
      << s.message();
}

TEST_F(TlsFilesTest, GenCertsMakesPrivateKeys) {
  struct stat st;
  ASSERT_EQ(stat(P("a/node-b.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(P("a/ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

// --tls-crl: the CRL is checked at load and handed to gRPC as a private hashed directory.
TEST_F(TlsFilesTest, CrlLoadsIntoAPrivateHashedDirectory) {
  std::string dir;
  {
    TlsConfig cfg;
    const TlsFiles f{P("a/127.0.0.1.crt"), P("a/127.0.0.1.key"), P("a/ca.crt"), P("a/ca.crl")};
    Status s = Load(f, TlsRole::kServer, &cfg);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_NE(cfg.crl_dir, nullptr);
    EXPECT_NE(cfg.crl_pem.find("BEGIN X509 CRL"), std::string::npos);
    EXPECT_EQ(cfg.crl_dir->revoked(), 1);  // node-r (the start-up log says how many)
    TlsConfig none;                        // b's CRL revokes nothing: the log said "-1 revoked"
    ASSERT_TRUE(Load({P("b/127.0.0.1.crt"), P("b/127.0.0.1.key"), P("b/ca.crt"), P("b/ca.crl")},
                     TlsRole::kServer, &none)
                    .ok());
    ASSERT_NE(none.crl_dir, nullptr);
    EXPECT_EQ(none.crl_dir->revoked(), 0);
    dir = cfg.crl_dir->path();
    struct stat st;
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    // OpenSSL's lookup name: the CA subject's hash, ".r0".
    const std::string hashed = dir + "/" + Hash(P("a/ca.crt")) + ".r0";
    EXPECT_EQ(stat(hashed.c_str(), &st), 0) << hashed;
    TlsConfig copy = cfg;  // the copies share it
    cfg = TlsConfig();
    EXPECT_EQ(stat(dir.c_str(), &st), 0);
  }
  struct stat st;
  EXPECT_NE(stat(dir.c_str(), &st), 0) << dir << " outlived its configs";
  // Without --tls-crl nothing is made.
  TlsConfig plain;
  ASSERT_TRUE(Load({"", "", P("a/ca.crt")}, TlsRole::kClient, &plain).ok());
  EXPECT_EQ(plain.crl_dir, nullptr);
}

TEST_F(TlsFilesTest, BadCrlFilesAreRefused) {
  auto client = [&](const std::string& crl) {
    return Load({"", "", P("a/ca.crt"), crl}, TlsRole::kClient).message();
  };
  std::string m = client(P("a/nope.crl"));
  EXPECT_NE(m.find("--tls-crl " + P("a/nope.crl") + ": cannot read: No such file"),
            std::string::npos)
      << m;
  m = client(P("junk.pem"));
  EXPECT_NE(m.find("--tls-crl " + P("junk.pem") + ": no PEM CRL in it"), std::string::npos) << m;
  m = client(P("a/ca.crt"));  // a certificate is not a CRL
  EXPECT_NE(m.find("--tls-crl " + P("a/ca.crt") + ": no PEM CRL in it"), std::string::npos) << m;
  m = client(P("b/ca.crl"));
  EXPECT_NE(m.find("--tls-crl " + P("b/ca.crl") +
                   ": its CRL (issuer /CN=hvd cluster CA) was not "
                   "issued by a CA of --tls-ca " +
                   P("a/ca.crt")),
            std::string::npos)
      << m;
  m = client(P("old.crl"));
  EXPECT_NE(m.find("--tls-crl " + P("old.crl") + ": the CRL is past its nextUpdate (Jan  2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("scripts/gen-certs.sh --out DIR --crl"), std::string::npos) << m;
  // A CRL alone is not TLS.
  m = Load({"", "", "", P("a/ca.crl")}, TlsRole::kClient).message();
  EXPECT_NE(m.find("TLS needs --tls-ca"), std::string::npos) << m;
}

TEST_F(TlsFilesTest, OwnRevokedCertificateIsRefused) {
  const TlsFiles revoked{P("a/node-r.crt"), P("a/node-r.key"), P("a/ca.crt"), P("a/ca.crl")};
  Status s = Load(revoked, TlsRole::kAgent);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--tls-cert " + P("a/node-r.crt") + " (/CN=node-r, serial "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("is revoked by --tls-crl " + P("a/ca.crl")), std::string::npos)
      << s.message();
  // Without the CRL it loads: the check is opt-in.
  EXPECT_TRUE(Load({revoked.cert, revoked.key, revoked.ca}, TlsRole::kAgent).ok());
  EXPECT_TRUE(
      Load({P("a/node-b.crt"), P("a/node-b.key"), P("a/ca.crt"), P("a/ca.crl")}, TlsRole::kAgent)
          .ok());
}

TEST_F(TlsFilesTest, CrlComesFromTheEnvironmentToo) {
  setenv("HVD_TLS_CRL", "/from/env.crl", 1);
  TlsFiles f;
  f.ca = "x";
  TlsFilesFromEnvironment(&f);
  EXPECT_EQ(f.crl, "/from/env.crl");
  f.crl = "/flag.crl";
  TlsFilesFromEnvironment(&f);
  EXPECT_EQ(f.crl, "/flag.crl");  // flags win
  unsetenv("HVD_TLS_CRL");
}

// tls_grpc.h with --tls-crl, in one process: the launcher's credentials refuse a revoked client
// certificate in the handshake and still take a good one (and none, as hvdrun) with the token;
// the channel still checks the launcher's host name.
TEST_F(TlsFilesTest, GrpcCredentialsWithCrlRefuseARevokedPeer) {
  const std::string crl = P("a/ca.crl");
  TlsConfig server_tls, good, revoked, anonymous;
  ASSERT_TRUE(Load({P("a/127.0.0.1.crt"), P("a/127.0.0.1.key"), P("a/ca.crt"), crl},
                   TlsRole::kServer, &server_tls)
                  .ok());
  ASSERT_TRUE(
      Load({P("a/node-b.crt"), P("a/node-b.key"), P("a/ca.crt"), crl}, TlsRole::kAgent, &good)
          .ok());
  ASSERT_TRUE(Load({"", "", P("a/ca.crt"), crl}, TlsRole::kClient, &anonymous).ok());
  // The revoked agent as if it skipped its own check (LoadTls refuses it with the CRL).
  ASSERT_TRUE(
      Load({P("a/node-r.crt"), P("a/node-r.key"), P("a/ca.crt")}, TlsRole::kAgent, &revoked).ok());
  revoked.crl_dir = good.crl_dir;

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  v1::Launcher::Service unimplemented;  // a sync service, so that the health service is one too
  builder.RegisterService(&unimplemented);
  int port = 0;
  builder.AddListeningPort(
      "127.0.0.1:0",
      ServerCredentialsFor(server_tls,
                           [](std::string_view, std::string_view token) { return token == "t"; }),
      &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto call = [&](const TlsConfig& tls, const std::string& target_name) {
    grpc::ChannelArguments args;
    if (!target_name.empty()) args.SetSslTargetNameOverride(target_name);
    auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                             ChannelCredentialsFor(tls), args);
    grpc::GenericStub stub(channel);
    auto ctx = NewClientContext("t", std::chrono::seconds(5));
    grpc::Slice empty("");  // an empty HealthCheckRequest: the server as a whole
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(ctx.get(), "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                   &response, [&](grpc::Status st) { done.set_value(st); });
    return done.get_future().get();
  };
  grpc::Status st = call(good, "");
  EXPECT_TRUE(st.ok()) << st.error_message();
  st = call(anonymous, "");
  EXPECT_TRUE(st.ok()) << st.error_message();
  st = call(revoked, "");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  st = call(good, "wrong.example");  // not in the launcher's certificate
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_NE(st.error_message().find("Hostname Verification Check failed"), std::string::npos)
      << st.error_message();
  EXPECT_NE(TlsFailureHint(st.error_message(), true).find("does not name the host"),
            std::string::npos);
  server->Shutdown();

  // The other way round: a launcher with a revoked certificate (and no CRL of its own) is
  // refused by a client given the CRL, and taken by one without it.
  TlsConfig revoked_server;
  ASSERT_TRUE(
      Load({P("a/node-r.crt"), P("a/node-r.key"), P("a/ca.crt")}, TlsRole::kServer, &revoked_server)
          .ok());
  grpc::ServerBuilder builder2;
  builder2.RegisterService(&unimplemented);
  builder2.AddListeningPort(
      "127.0.0.1:0",
      ServerCredentialsFor(revoked_server, [](std::string_view, std::string_view) { return true; }),
      &port);
  server = builder2.BuildAndStart();
  ASSERT_NE(server, nullptr);
  st = call(anonymous, "");
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  TlsConfig no_crl = anonymous;
  no_crl.crl_dir = nullptr;
  st = call(no_crl, "");
  EXPECT_TRUE(st.ok()) << st.error_message();
  server->Shutdown();
}

TEST(TlsFailureHint, NamesTheFlagAtFault) {
  EXPECT_NE(TlsFailureHint("Ssl handshake failed: SSL_ERROR_SSL: error:0A000086:SSL "
                           "routines::certificate verify failed",
                           true)
                .find("--tls-ca"),
            std::string::npos);
  EXPECT_NE(TlsFailureHint("ipv4:127.0.0.1:1: Socket closed", false).find("pass --tls-ca"),
            std::string::npos);
  EXPECT_NE(TlsFailureHint("ipv4:127.0.0.1:1: Socket closed", true).find("--tls-cert"),
            std::string::npos);
  EXPECT_NE(TlsFailureHint("Ssl handshake failed: SSL_ERROR_SSL: error:0A00042C:SSL "
                           "routines::tlsv13 alert certificate revoked",
                           true)
                .find("refused this program's certificate as revoked"),
            std::string::npos);
  // A running agent whose launcher restarted refusing its certificate waits for a channel that
  // never becomes ready: the timeout must not read as a wrong address only.
  EXPECT_NE(TlsFailureHint("launcher at h:1: no RegisterAck within 10000 ms (is that address the "
                           "launcher's gRPC endpoint?)",
                           true)
                .find("not revoked"),
            std::string::npos);
  EXPECT_NE(TlsFailureHint("launcher at h:1: no RegisterAck within 10000 ms", true)
                .find("either the launcher is down or unreachable"),
            std::string::npos);
  EXPECT_EQ(TlsFailureHint("launcher at h:1: no RegisterAck within 10000 ms", false), "");
  // Nothing listens: no TLS advice either way.
  const std::string refused =
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7999: Failed to "
      "connect to remote host: Connection refused";
  EXPECT_EQ(TlsFailureHint(refused, false), "");
  EXPECT_NE(TlsFailureHint("failed to connect to all addresses; last error: UNKNOWN: "
                           "ipv4:127.0.0.1:7070: Handshake read failed",
                           true)
                .find("--tls-ca must be the CA that signed the launcher's certificate"),
            std::string::npos);
  EXPECT_EQ(TlsFailureHint("job not found", true), "");
}

}  // namespace
}  // namespace hvd::control
