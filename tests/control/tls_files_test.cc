// control/tls.h: each wrong --tls-* file is refused naming the flag, the path and what is wrong,
// before gRPC sees it. Certificates come from scripts/gen-certs.sh (once for the binary), the
// expired one from `openssl ca` with dates in the past.
#include "control/tls.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace hvd::control {
namespace {

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/hvd_tls_files_test.XXXXXX";
    dir_ = new std::string(mkdtemp(tmpl));
    const std::string d = *dir_;
    const std::string gen = std::string(HVD_SOURCE_DIR) + "/scripts/gen-certs.sh";
    // The cluster, another CA, and a certificate of the cluster CA that expired in 2020.
    const std::string script =
        gen + " --out " + d + "/a --hosts 127.0.0.1,node-b 2>/dev/null && " + gen + " --out " + d +
        "/b --hosts 127.0.0.1 2>/dev/null && cd " + d +
        " && touch index.txt && echo 01 > serial && printf '[ca]\\ndefault_ca=x\\n[x]\\n"
        "database=index.txt\\nnew_certs_dir=.\\npolicy=p\\ndefault_md=sha256\\nserial=serial\\n"
        "[p]\\ncommonName=supplied\\n' > ca.cnf && openssl req -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -keyout old.key -out old.csr -subj /CN=old "
        "2>/dev/null && openssl ca -batch -config ca.cnf -cert a/ca.crt -keyfile a/ca.key -in "
        "old.csr -out old.crt -startdate 20200101000000Z -enddate 20200102000000Z -notext "
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
  EXPECT_EQ(TlsFailureHint("job not found", true), "");
}

}  // namespace
}  // namespace hvd::control
