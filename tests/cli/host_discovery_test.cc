// hvdrun --host-discovery-script's runner (cli/host_discovery.h): what a script's output and
// failures become, and that stopping discovery ends a script that hangs at once (it held
// hvdrun's exit, and Ctrl-C, for the script's 10 s timeout).
#include "cli/host_discovery.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "testutil/expect.h"

namespace hvd::cli {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(RunDiscoveryScript, ParsesHostLinesAndShowsAFailuresStderrOnOneLine) {
  std::vector<control::HostSlots> hosts;
  ASSERT_TRUE(
      RunDiscoveryScript("printf 'a:2\\n b \\r\\n\\n'", milliseconds(5000), 3, &hosts).ok());
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "a");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].host, "b");
  EXPECT_EQ(hosts[1].slots, 3);

  Status s = RunDiscoveryScript("echo 'line one' >&2; echo 'line two' >&2; exit 3",
                                milliseconds(5000), 1, &hosts);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_HAS(s.message(), "failed (exit code 3): line one; line two");
  EXPECT_EQ(s.message().find("\\n"), std::string::npos) << s.message();
}

TEST(RunDiscoveryScript, AHungScriptTimesOut) {
  std::vector<control::HostSlots> hosts;
  Status s = RunDiscoveryScript("sleep 30", milliseconds(200), 1, &hosts);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_HAS(s.message(), "did not finish within 0.2 s");
}

TEST(HostDiscovery, StoppingEndsAHungScriptAtOnceAndSaysNothingOfIt) {
  base::Mutex mu;
  std::vector<std::string> said;
  HostDiscovery::Options options;
  options.command = "sleep 30";
  options.interval = milliseconds(10);
  options.timeout = milliseconds(10000);
  auto discovery = std::make_unique<HostDiscovery>(
      options, std::vector<control::HostSlots>{{"a", 1}},
      [](const std::vector<control::HostSlots>&) { return Status::OK(); },
      [&](const std::string& m) {
        base::MutexLock lock(&mu);
        said.push_back(m);
      });
  std::this_thread::sleep_for(milliseconds(300));  // the script runs (and hangs) by now
  const auto t0 = Clock::now();
  discovery->Stop();
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
  discovery.reset();
  base::MutexLock lock(&mu);
  EXPECT_TRUE(said.empty()) << said[0];
}

}  // namespace
}  // namespace hvd::cli
