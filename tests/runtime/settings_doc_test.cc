// Every setting declared in the code is documented in docs/configuration.md (name, Horovod alias
// and default), and malformed values are rejected with the variable's name.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "base/settings.h"
#include "hvd/hvd.h"

namespace hvd::base {
namespace {

std::string ReadDoc() {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Settings, EveryDeclaredSettingIsDocumented) {
  ASSERT_FALSE(hvd::IsInitialized());  // links the engine (and its settings) into this binary
  const std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md is missing";
  ASSERT_GE(AllSettings().size(), 20u);
  for (const SettingInfo& s : AllSettings()) {
    // A row reads: | `NAME` | `ALIAS` or - | default | meaning |
    std::string row = "| `" + s.name + "` | " + (s.alias.empty() ? "-" : "`" + s.alias + "`") +
                      " | " + s.default_text + " |";
    EXPECT_NE(doc.find(row), std::string::npos) << "docs/configuration.md lacks the row:\n"
                                                << row << " " << s.help << " |";
  }
}

TEST(Settings, MalformedValuesNameTheVariable) {
  Setting<int64_t> n("HVD_TEST_ONLY_INT", "HOROVOD_TEST_ONLY_INT", 7, "test");
  Setting<bool> b("HVD_TEST_ONLY_BOOL", nullptr, false, "test");
  int64_t v = 0;
  ASSERT_TRUE(n.Get(&v).ok());
  EXPECT_EQ(v, 7);
  setenv("HOROVOD_TEST_ONLY_INT", "12", 1);
  ASSERT_TRUE(n.Get(&v).ok());
  EXPECT_EQ(v, 12);
  setenv("HVD_TEST_ONLY_INT", "12x", 1);  // the hvd name wins over the alias
  Status s = n.Get(&v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("HVD_TEST_ONLY_INT=12x"), std::string::npos) << s.message();
  setenv("HVD_TEST_ONLY_BOOL", "maybe", 1);
  bool bv;
  EXPECT_FALSE(b.Get(&bv).ok());
  setenv("HVD_TEST_ONLY_BOOL", "on", 1);
  ASSERT_TRUE(b.Get(&bv).ok());
  EXPECT_TRUE(bv);
  unsetenv("HVD_TEST_ONLY_INT");
  unsetenv("HOROVOD_TEST_ONLY_INT");
  unsetenv("HVD_TEST_ONLY_BOOL");
}

}  // namespace
}  // namespace hvd::base
