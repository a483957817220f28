#include "cli/ssh_agent.h"

#if HVD_CLI_SSH

namespace hvd::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kTailLines = 12;
constexpr auto kPoll = std::chrono::milliseconds(100);

// What an exit status of the remote shell means for hvd-agent.
std::string DescribeExit(int code, const std::string& command) {
  if (code == 127) {
    return "hvd-agent was not found there (exit 127 from `" + command +
           "`); install it on the host or pass --ssh-agent-path";
  }
  if (code == 126) return "hvd-agent there is not executable (exit 126); check its mode";
  if (code < 0) return "hvd-agent ended without an exit status (killed, or the connection broke)";
  return "hvd-agent exited with code " + std::to_string(code);
}

}  // namespace

RemoteAgent::RemoteAgent(SshTarget target, std::string command, std::string token,
                         std::function<void(const std::string&)> say)
    : target_(std::move(target)),
      command_(std::move(command)),
      token_(std::move(token)),
      say_(std::move(say)) {}

RemoteAgent::~RemoteAgent() {
  Stop(std::chrono::seconds(0));
}

void RemoteAgent::Begin() {
  thread_ = std::thread([this] { Run(); });
}

RemoteAgent::State RemoteAgent::state(std::string* why) const {
  base::MutexLock lock(&mu_);
  *why = why_;
  return state_;
}

std::string RemoteAgent::Tail() const {
  base::MutexLock lock(&mu_);
  std::string t;
  for (const std::string& l : tail_) t += (t.empty() ? "" : "\n") + l;
  return t;
}

void RemoteAgent::Stop(std::chrono::milliseconds grace) {
  {
    base::MutexLock lock(&mu_);
    if (!stop_) grace_ = grace;
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void RemoteAgent::Relay(const std::string& text) {
  std::vector<std::string> lines;
  {
    base::MutexLock lock(&mu_);
    partial_ += text;
    size_t nl;
    while ((nl = partial_.find('\n')) != std::string::npos) {
      lines.push_back(partial_.substr(0, nl));
      partial_.erase(0, nl + 1);
      tail_.push_back(lines.back());
      if (tail_.size() > kTailLines) tail_.pop_front();
    }
  }
  if (!say_) return;
  for (const std::string& l : lines) say_("ssh " + target_.host + ": hvd-agent: " + l);
}

void RemoteAgent::End(const std::string& why) {
  base::MutexLock lock(&mu_);
  if (!partial_.empty()) tail_.push_back(partial_);
  state_ = State::kEnded;
  why_ = why;
}

void RemoteAgent::Run() {
  std::unique_ptr<SshSession> ssh;
  Status s = SshSession::Connect(target_, &ssh);
  if (s.ok()) {
    {
      base::MutexLock lock(&mu_);
      where_ = ssh->where();
    }
    if (say_) say_("ssh " + ssh->where() + ": connected (" + ssh->host_key() + ")");
    s = ssh->Exec(command_, token_);
  }
  if (!s.ok()) return End(s.message());
  {
    base::MutexLock lock(&mu_);
    state_ = State::kStarted;
  }
  bool stdin_closed = false;
  Clock::time_point give_up;
  while (true) {
    std::string out;
    const bool alive = ssh->Read(kPoll, &out);
    if (!out.empty()) Relay(out);
    if (!alive) break;
    base::MutexLock lock(&mu_);
    if (stop_ && !stdin_closed) {
      ssh->CloseStdin();  // the agent stops its workers, then exits
      stdin_closed = true;
      give_up = Clock::now() + grace_;
    }
    if (stdin_closed && Clock::now() >= give_up) {
      // Disconnecting closes its stdin for good; it finishes stopping by itself.
      why_ = "ssh " + ssh->where() + ": hvd-agent did not exit within " +
             std::to_string(grace_.count() / 1000) + " s of its stdin closing; it stops by itself";
      state_ = State::kEnded;
      return;
    }
  }
  const int code = ssh->exit_status();
  bool stopping;
  {
    base::MutexLock lock(&mu_);
    stopping = stop_;
  }
  if (say_) say_("ssh " + ssh->where() + ": hvd-agent exited (" + std::to_string(code) + ")");
  End(stopping && code == 0 ? "" : "ssh " + ssh->where() + ": " + DescribeExit(code, command_));
}

}  // namespace hvd::cli

#endif  // HVD_CLI_SSH
