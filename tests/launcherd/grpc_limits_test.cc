// gRPC calls without a valid token must not cost the launcher their size (issue 20, finding 7).
// gRPC 1.51's sync server assembles a unary call's whole message before any handler runs (and
// before it applies its receive limit), so the launcher checks the token in a gate on its
// credentials (control/token_gate.h), on the call's headers, and refuses before the body is read.
// A real hvd-launcherd process takes eight 60 MiB calls without a valid token, four at a time;
// each is refused with the handlers' own codes and messages, and its resident memory stays
// bounded (measured without the gate: +233 MiB peak, +176 MiB kept).
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include "cli/hvdrun_process.h"
#include "control/grpc_util.h"
#include "hvd/v1/launcher.grpc.pb.h"

namespace hvd::launcherd {
namespace {

using namespace std::chrono_literals;

// The built hvd-launcherd: HVD_LAUNCHERD_PATH when the build names it, else next to this test
// (build/tests/X -> build/launcherd/hvd-launcherd).
std::string LauncherdPath() {
#ifdef HVD_LAUNCHERD_PATH
  return HVD_LAUNCHERD_PATH;
#else
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string exe(buf, n > 0 ? n : 0);
  exe = exe.substr(0, exe.rfind('/'));  // build/tests
  return exe.substr(0, exe.rfind('/')) + "/launcherd/hvd-launcherd";
#endif
}

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM"); -1 when unreadable.
long StatusKib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

TEST(GrpcLimits, LargeCallsWithoutTokenAreRefusedWithBoundedMemory) {
  const std::string path = LauncherdPath();
  ASSERT_EQ(access(path.c_str(), X_OK), 0) << path << " is not built";
  clitest::TempDir dir;
  const std::string token = "grpc-limits-token-0123456789abcdef";
  clitest::WriteFile(dir / "token", token + "\n", 0600);
  clitest::Proc launcher({path, "--listen", "127.0.0.1:0", "--rendezvous-listen", "127.0.0.1:0",
                          "--token-file", dir / "token"},
                         dir.path());
  std::smatch m;
  const std::regex start("hvd-launcherd: gRPC (127\\.0\\.0\\.1:[0-9]+)");
  std::string out;
  for (int i = 0; i < 500 && !std::regex_search(out, m, start); ++i) {
    std::this_thread::sleep_for(10ms);
    out = launcher.Out();
  }
  ASSERT_TRUE(std::regex_search(out, m, start)) << out << launcher.Err();
  const std::string address = m[1];
  auto stub = v1::Launcher::NewStub(control::NewChannel(address));
  {  // warm up: one ordinary call, so the baseline includes gRPC's own buffers
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub->ListJobs(control::NewClientContext(token, 5s).get(), {}, &resp).ok());
  }
  const long base = StatusKib(launcher.pid(), "VmRSS");
  ASSERT_GT(base, 0);

  // 60 MiB each, four at a time, twice: no token, and a wrong one.
  v1::SubmitJobRequest big;
  big.mutable_spec()->add_argv(std::string(60 << 20, 'x'));
  big.mutable_spec()->set_np(1);
  for (const bool with_token : {false, true}) {
    std::vector<std::thread> calls;
    std::vector<grpc::Status> results(4);
    for (int i = 0; i < 4; ++i) {
      calls.emplace_back([&, i] {
        grpc::ClientContext ctx;  // no "hvd-token" at all, or a wrong one
        if (with_token) ctx.AddMetadata("hvd-token", "wrong-token");
        ctx.set_deadline(std::chrono::system_clock::now() + 30s);
        v1::SubmitJobResponse resp;
        results[i] = stub->SubmitJob(&ctx, big, &resp);
      });
    }
    for (std::thread& c : calls) c.join();
    for (const grpc::Status& s : results) {
      EXPECT_EQ(s.error_code(), with_token ? grpc::StatusCode::PERMISSION_DENIED
                                           : grpc::StatusCode::UNAUTHENTICATED)
          << s.error_message();
      EXPECT_NE(s.error_message().find(with_token ? "wrong cluster token" : "no cluster token"),
                std::string::npos)
          << s.error_message();
    }
  }
  const long peak = StatusKib(launcher.pid(), "VmHWM");
  const long now = StatusKib(launcher.pid(), "VmRSS");
  std::fprintf(stderr, "launcher RSS: %ld KiB before, peak %ld KiB, %ld KiB after\n", base, peak,
               now);
  // Four calls at once buffered in full would be 240 MiB; bounded, it is a few limits' worth.
  EXPECT_LT(peak - base, 64 * 1024) << "peak RSS grew from " << base << " KiB to " << peak;
  EXPECT_LT(now - base, 32 * 1024) << "RSS grew from " << base << " KiB to " << now;

  // Still answering, and a small call without the token is refused as before.
  v1::ListJobsResponse resp;
  EXPECT_TRUE(stub->ListJobs(control::NewClientContext(token, 5s).get(), {}, &resp).ok());
  const grpc::Status denied = stub->ListJobs(control::NewClientContext("", 5s).get(), {}, &resp);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED) << denied.error_message();
  // With the token, a message above the 4 MiB limit is refused too (after the gate).
  v1::SubmitJobRequest over;
  over.mutable_spec()->add_argv(std::string(5 << 20, 'y'));
  v1::SubmitJobResponse submitted;
  const grpc::Status too_big =
      stub->SubmitJob(control::NewClientContext(token, 10s).get(), over, &submitted);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();

  launcher.Signal(SIGTERM);
  const clitest::ProcResult r = launcher.Wait(10s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(clitest::Leftovers(), std::vector<std::string>{});
}

}  // namespace
}  // namespace hvd::launcherd
