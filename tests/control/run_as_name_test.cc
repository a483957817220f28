// --run-as USER's form (control/spec_limits.h, CheckUserName), as hvdrun and the launcher both
// check it: names useradd and systemd accept pass; what no host could resolve as a name, or what
// would be read as something else (a flag, a uid), is refused naming the flag.
#include <gtest/gtest.h>

#include "control/job_model_proto.h"  // ValidateJobSpec of a received hvd.v1.JobSpec
#include "control/spec_limits.h"
#include "testutil/expect.h"

namespace hvd::control {
namespace {

TEST(RunAsName, AcceptsUserNames) {
  for (const char* ok : {"alice", "hvdtest-runas", "svc_train", "A.b-c_d", "machine$", "u1"}) {
    EXPECT_TRUE(CheckUserName(ok).ok()) << ok << ": " << CheckUserName(ok).message();
  }
  EXPECT_TRUE(CheckUserName(std::string(kMaxUserNameBytes, 'a')).ok());
}

TEST(RunAsName, RefusesWhatIsNoName) {
  const struct {
    std::string name;
    const char* why;
  } cases[] = {{"", "empty"},
               {"-rf", "does not start with '-'"},
               {"a b", "only letters"},
               {"a/b", "only letters"},
               {"a$b", "only letters"},
               {std::string("a\0b", 3), "only letters"},
               {"1000", "a number is a uid"},
               {"..", "not a user name"},
               {std::string(kMaxUserNameBytes + 1, 'a'), "at most 32 bytes"}};
  for (const auto& c : cases) {
    Status s = CheckUserName(c.name);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_HAS(s.message(), "--run-as '");
    EXPECT_HAS(s.message(), c.why);
  }
}

// The launcher's validator applies it to every spec, whoever submitted it.
TEST(RunAsName, ValidateJobSpecChecksIt) {
  v1::JobSpec s;
  s.add_argv("/bin/true");
  s.set_np(1);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.set_run_as("alice");
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.set_run_as("alice;rm");
  EXPECT_HAS(ValidateJobSpec(s).message(), "--run-as 'alice;rm'");
}

}  // namespace
}  // namespace hvd::control
