#include "cli/embedded.h"

#include <cstdlib>

#include "base/logging.h"

namespace hvd::cli {

void SetEmbeddedLogLevel(const std::string& level, bool verbose) {
  if (std::getenv("HVD_LOG_LEVEL") != nullptr || std::getenv("HOROVOD_LOG_LEVEL") != nullptr) {
    return;
  }
  const std::string wanted = !level.empty() ? level : verbose ? "warning" : "error";
  // HVD_LOG reads HVD_LOG_LEVEL once, at its first use: set it, latch it, and unset it again.
  setenv("HVD_LOG_LEVEL", wanted.c_str(), 1);
  (void)base::LogEnabled(base::LogLevel::INFO);
  unsetenv("HVD_LOG_LEVEL");
}

}  // namespace hvd::cli

#if HVD_CLI_EMBEDDED

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "base/errno_text.h"
#include "cli/client.h"
#include "control/token.h"
#include "launcherd/launcher.h"

namespace hvd::cli {
namespace {

// Registration is a local round trip; this bound only matters when something is broken.
constexpr std::chrono::seconds kRegisterWait{15};

class EmbeddedClusterImpl : public EmbeddedCluster {
 public:
  ~EmbeddedClusterImpl() override { Stop(); }

  const std::string& address() const override { return address_; }
  const std::string& token() const override { return token_; }
  const std::string& token_file() const override { return token_file_; }
  std::string rendezvous_address() const override {
    return launcher_ ? launcher_->rendezvous_address() : "";
  }

  void Stop() override {
    // The agent first: its Stop() ends and reaps every worker while the launcher can still
    // record their exits.
    if (agent_) agent_->Stop();
    if (launcher_) launcher_->Stop();
    agent_.reset();
    launcher_.reset();
    if (!token_file_.empty()) {
      RemoveTokenDir(token_file_.substr(0, token_file_.rfind('/')));
      token_file_.clear();
    }
  }

  Status Begin(const EmbeddedOptions& o) {
    token_ = control::RandomHex(32);
    token_file_ = WriteTokenFile(token_);
    launcherd::LauncherOptions lo;
    lo.listen = "127.0.0.1:0";
    lo.token = token_;
    lo.kill_grace = o.kill_grace;
    // Its one agent is started below; it listens on 127.0.0.1 with a token only this user reads.
    lo.closed_cluster = true;
    HVD_RETURN_IF_ERROR_CTX(launcherd::Launcher::Start(lo, &launcher_), "embedded launcher");
    address_ = launcher_->grpc_address();
    agent::AgentOptions ao;
    ao.launcher = address_;
    ao.token = token_;
    ao.slots = o.slots;
    ao.host = o.agent_host;
    ao.advertise_addr = "127.0.0.1";
    ao.wrapper_path = o.wrapper_path;
    // hvdrun --run-as root: the embedded agent runs as hvdrun's user, so ranks it runs as root
    // are ranks a root user started; the refusal guards agents that others' jobs reach.
    ao.allow_run_as_root = true;
    HVD_RETURN_IF_ERROR_CTX(agent::Agent::Start(ao, &agent_), "embedded agent");
    return WaitForAgent();
  }

 private:
  Status WaitForAgent() {
    Client client(address_, token_, std::chrono::seconds(5));
    const auto deadline = std::chrono::steady_clock::now() + kRegisterWait;
    Status last;
    // Registration takes a few milliseconds in-process: poll fast at first (each poll is a local
    // RPC of well under a millisecond), so `hvdrun -np N` does not wait out a fixed period.
    auto pause = std::chrono::milliseconds(1);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<control::AgentInfo> agents;
      last = client.ListAgents(&agents);
      for (const control::AgentInfo& a : agents) {
        if (a.state == "READY") return Status::OK();
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
    return DeadlineExceeded("the embedded agent did not register with the embedded launcher at " +
                            address_ + " within " + std::to_string(kRegisterWait.count()) + " s" +
                            (last.ok() ? "" : " (last error: " + last.message() + ")") +
                            "; run with --verbose and HVD_LOG_LEVEL=info to see why");
  }

  // A token directory (WriteTokenFile's) and its file.
  static void RemoveTokenDir(const std::string& dir) {
    unlink((dir + "/token").c_str());
    rmdir(dir.c_str());
  }

  // The token directories (hvdrun-PID-XXXXXX, this user's) of hvdruns no longer running: one
  // killed outright (SIGKILL, SIGPIPE) could not remove its own.
  static void RemoveDeadTokenDirs(const std::string& parent) {
    DIR* d = opendir(parent.c_str());
    if (d == nullptr) return;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("hvdrun-", 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + 7, nullptr, 10);
      const std::string dir = parent + "/" + name;
      struct stat st;
      if (pid <= 0 || pid == getpid() || lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != geteuid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) {
        continue;
      }
      RemoveTokenDir(dir);
    }
    closedir(d);
  }

  // `token` in DIR/token, DIR a new mode-0700 directory; the file's path, or "" (with a log line)
  // where that failed.
  static std::string WriteTokenFile(const std::string& token) {
    std::string parent;
    for (const char* var : {"XDG_RUNTIME_DIR", "TMPDIR"}) {
      const char* v = std::getenv(var);
      struct stat st;
      if (v == nullptr || *v != '/' || access(v, W_OK | X_OK) != 0 || stat(v, &st) != 0) continue;
      // $XDG_RUNTIME_DIR must be this user's own (under `sudo -E` it is the caller's: a
      // directory root made there would be neither readable nor removable by its owner).
      if (std::string(var) == "XDG_RUNTIME_DIR" && st.st_uid != geteuid()) continue;
      parent = v;
      break;
    }
    if (parent.empty()) parent = "/tmp";
    RemoveDeadTokenDirs(parent);
    std::string dir = parent + "/hvdrun-" + std::to_string(getpid()) + "-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      HVD_LOG(INFO) << "embedded launcher: no token file (mkdtemp in " << parent
                    << "): " << base::ErrnoText(errno);
      return "";
    }
    const std::string path = dir + "/token";
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    const bool written =
        fd >= 0 && write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
    const int err = errno;
    if (fd >= 0) close(fd);
    if (!written) {
      HVD_LOG(INFO) << "embedded launcher: no token file (" << path
                    << "): " << base::ErrnoText(err);
      RemoveTokenDir(dir);
      return "";
    }
    return path;
  }

  std::string token_;
  std::string token_file_;
  std::string address_;
  std::unique_ptr<launcherd::Launcher> launcher_;
  std::unique_ptr<agent::Agent> agent_;
};

}  // namespace

Status EmbeddedCluster::Start(const EmbeddedOptions& options,
                              std::unique_ptr<EmbeddedCluster>* out) {
  auto impl = std::make_unique<EmbeddedClusterImpl>();
  Status s = impl->Begin(options);
  if (!s.ok()) return s;  // the destructor stops whatever did start
  *out = std::move(impl);
  return Status::OK();
}

bool HaveEmbeddedCluster() {
  return true;
}

}  // namespace hvd::cli

#else  // !HVD_CLI_EMBEDDED

namespace hvd::cli {

Status EmbeddedCluster::Start(const EmbeddedOptions&, std::unique_ptr<EmbeddedCluster>*) {
  return Unimplemented(
      "this hvdrun was built without the embedded launcher and agent; pass --launcher HOST:PORT "
      "to run on a cluster");
}

bool HaveEmbeddedCluster() {
  return false;
}

}  // namespace hvd::cli

#endif
