// Issue 22: "the launcher stops on SIGTERM within a second, whatever it is doing". A real
// hvd-launcherd process, a few hundred simulated agents (bench/control_plane's hvd_agent_swarm, a
// client of the real protocol) holding a 2,400-rank job, and jobs submitted back to back while the
// signal arrives: the launcher must exit 0 within 1.5 s of SIGTERM, and leave no process behind.
// The binaries are found next to this test's build directory (build/launcherd/hvd-launcherd,
// build/bench/control_plane/hvd_agent_swarm); the test is skipped, saying so, without them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <regex>
#include <thread>

#include "control/grpc_util.h"
#include "hvd/v1/launcher.grpc.pb.h"
#include "tests/cli/hvdrun_process.h"

namespace hvd::launcherd {
namespace {

using clitest::Proc;
using clitest::TempDir;
using namespace std::chrono_literals;

constexpr int kAgents = 300;
constexpr int kSlots = 8;
constexpr const char* kToken = "sigterm-test-token-0123456789abcdef";

std::string BuildDir() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  std::string path(exe, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/'));  // build/tests
  return path.substr(0, path.rfind('/'));  // build
}

bool Executable(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

// Polls `probe` every 20 ms for up to `timeout`.
template <class F>
bool WaitFor(F probe, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (probe()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return probe();
}

bool GroupGone(pid_t pgid) {
  return kill(-pgid, 0) != 0 && errno == ESRCH;
}

TEST(LauncherSigtermTest, StopsWithinASecondUnderLoad) {
  const std::string build = BuildDir();
  const std::string launcherd = build + "/launcherd/hvd-launcherd";
  const std::string swarm_bin = build + "/bench/control_plane/hvd_agent_swarm";
  if (!Executable(launcherd) || !Executable(swarm_bin)) {
    GTEST_SKIP() << "needs " << launcherd << " and " << swarm_bin
                 << " (cmake --build build --target hvd-launcherd hvd_agent_swarm)";
  }
  TempDir dir;
  const std::string token_file = dir / "token";
  clitest::WriteFile(token_file, kToken, 0600);

  auto launcher = std::make_unique<Proc>(
      std::vector<std::string>{launcherd, "--listen", "127.0.0.1:0", "--rendezvous-listen",
                               "127.0.0.1:0", "--http", "127.0.0.1:0", "--token-file", token_file,
                               "--log-level", "info"},
      dir.path());
  const pid_t launcher_pid = launcher->pid();
  std::smatch m;
  const std::regex started(R"(gRPC (127\.0\.0\.1:\d+), rendezvous \S+, HTTP 127\.0\.0\.1:(\d+))");
  std::string out;
  ASSERT_TRUE(WaitFor(
      [&] {
        out = launcher->Out();
        return std::regex_search(out, m, started);
      },
      15s))
      << out << launcher->Err();
  const std::string grpc = m[1];
  const int http_port = std::stoi(m[2]);

  Proc swarm({swarm_bin, "--launcher", grpc, "--token-file", token_file, "--agents",
              std::to_string(kAgents), "--slots", std::to_string(kSlots),
              // Stdin is not a driver here: run until SIGTERM (or a minute at most).
              "--duration", "60"},
             dir.path());
  httplib::Client http("127.0.0.1", http_port);
  http.set_connection_timeout(2);
  http.set_read_timeout(2);
  const std::string ready = "hvd_agents{state=\"READY\"} " + std::to_string(kAgents) + "\n";
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = http.Get("/metrics");
        return r && r->status == 200 && r->body.find(ready) != std::string::npos;
      },
      20s))
      << "not every agent registered; swarm: " << swarm.Out() << swarm.Err();

  // The load: a job on every slot whose ranks keep running, then small jobs back to back that
  // queue behind it, still being submitted when the signal arrives.
  auto stub = v1::Launcher::NewStub(control::NewChannel(grpc));
  auto submit = [&](int np, const std::string& arg) {
    v1::SubmitJobRequest req;
    req.mutable_spec()->add_argv("sim");
    req.mutable_spec()->add_argv(arg);
    req.mutable_spec()->set_np(np);
    req.mutable_spec()->set_detached(true);
    v1::SubmitJobResponse resp;
    auto ctx = control::NewClientContext(kToken, 5s);
    return stub->SubmitJob(ctx.get(), req, &resp);
  };
  grpc::Status big = submit(kAgents * kSlots, "--hold");
  ASSERT_TRUE(big.ok()) << big.error_message();
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = http.Get("/metrics");
        return r && r->status == 200 &&
               r->body.find("hvd_ranks_running " + std::to_string(kAgents * kSlots) + "\n") !=
                   std::string::npos;
      },
      20s))
      << "the held job did not start on every slot";
  std::atomic<bool> stop{false};
  std::thread submitter([&] {
    while (!stop.load() && submit(80, "--run-ms=50").ok()) {
    }
  });
  std::this_thread::sleep_for(300ms);

  const auto signalled = std::chrono::steady_clock::now();
  launcher->Signal(SIGTERM);
  clitest::ProcResult r = launcher->Wait(5s);
  const double stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  stop = true;
  submitter.join();
  const size_t stopped = r.err.rfind("stopped in ");
  std::printf("hvd-launcherd exited %.3f s after SIGTERM (its log: %s)\n", stop_s,
              stopped == std::string::npos
                  ? "no stop line"
                  : r.err.substr(stopped, r.err.find('\n', stopped) - stopped).c_str());
  EXPECT_FALSE(r.timed_out) << "hvd-launcherd ignored SIGTERM for 5 s; stderr: " << r.err;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(stop_s, 1.5) << "hvd-launcherd took " << stop_s << " s to stop; stderr: " << r.err;
  EXPECT_TRUE(WaitFor([&] { return GroupGone(launcher_pid); }, 2s))
      << "a process of hvd-launcherd's group is left";

  swarm.Signal(SIGTERM);
  clitest::ProcResult sr = swarm.Wait(10s);
  EXPECT_FALSE(sr.timed_out) << sr.err;
  EXPECT_TRUE(WaitFor([] { return clitest::LiveChildren().empty(); }, 2s))
      << "left: " << ::testing::PrintToString(clitest::LiveChildren());
}

}  // namespace
}  // namespace hvd::launcherd
