// Issue 20, finding 11: a worker's environment never holds the job secret. SpawnProcess moves
// HVD_JOB_SECRET into a sealed memfd at kJobSecretFd and names it in HVD_JOB_SECRET_FD; the
// runtime reads it from there (tests/comm/job_secret_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/process_spawn.h"

#ifndef HVD_AGENT_PATH
#error "tests/CMakeLists.txt must define HVD_AGENT_PATH for job_secret_spawn_test"
#endif

namespace hvd::agent {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Ends the wrapper (closing the lifeline makes it kill the worker) and reaps it, bounded.
void Finish(SpawnedProcess& p) {
  close(p.lifeline_fd);
  kill(-p.worker_pid, SIGKILL);
  bool reaped = false;
  for (int i = 0; i < 500 && !reaped; ++i) {
    reaped = waitpid(p.pid, nullptr, WNOHANG) == p.pid;
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reaped) {
    kill(-p.pid, SIGKILL);
    waitpid(p.pid, nullptr, 0);
  }
  for (int fd : {p.stdout_fd, p.stderr_fd, p.status_fd}) close(fd);
  EXPECT_TRUE(reaped) << "the wrapper did not end after its lifeline closed";
  EXPECT_NE(kill(p.worker_pid, 0), 0) << "the worker survived";
}

TEST(JobSecretSpawn, SecretIsInADescriptorNotTheEnvironment) {
  const std::string secret = "s3cr3t-0123456789abcdef";
  SpawnRequest req;
  req.argv = {"/bin/sleep", "30"};
  req.env = {{"HVD_JOB_SECRET", secret}, {"HVD_MARK", "job-secret-test"}};
  req.wrapper = HVD_AGENT_PATH;
  SpawnedProcess p;
  Status s = SpawnProcess(req, &p);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string proc = "/proc/" + std::to_string(p.worker_pid);
  const std::string environ_text = ReadAll(proc + "/environ");
  EXPECT_NE(environ_text.find("HVD_MARK=job-secret-test"), std::string::npos)
      << "read the wrong process's environment?";
  EXPECT_EQ(environ_text.find(secret), std::string::npos) << "the secret is in the environment";
  EXPECT_NE(environ_text.find(std::string("HVD_JOB_SECRET_FD=") + std::to_string(kJobSecretFd)),
            std::string::npos);
  EXPECT_EQ(ReadAll(proc + "/fd/" + std::to_string(kJobSecretFd)), secret);
  // The wrapper (the agent's side of the worker) does not carry it in its environment either.
  EXPECT_EQ(ReadAll("/proc/" + std::to_string(p.pid) + "/environ").find(secret), std::string::npos);
  Finish(p);
}

TEST(JobSecretSpawn, NoSecretNoDescriptor) {
  SpawnRequest req;
  req.argv = {"/bin/sleep", "30"};
  req.wrapper = HVD_AGENT_PATH;
  SpawnedProcess p;
  Status s = SpawnProcess(req, &p);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::string proc = "/proc/" + std::to_string(p.worker_pid);
  EXPECT_EQ(ReadAll(proc + "/environ").find("HVD_JOB_SECRET"), std::string::npos);
  char buf[64];
  EXPECT_LT(readlink((proc + "/fd/" + std::to_string(kJobSecretFd)).c_str(), buf, sizeof buf), 0)
      << "descriptor " << kJobSecretFd << " is open in a worker without a secret";
  Finish(p);
}

}  // namespace
}  // namespace hvd::agent
