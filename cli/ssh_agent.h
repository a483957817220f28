// One hvd-agent that hvdrun --ssh started on a host, with the thread that owns its SSH session:
// connect, check the host key, authenticate, start the agent, then relay its log and watch for
// its end; on Stop, close its stdin (the agent then stops) and wait, bounded, for it to exit.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "base/mutex.h"
#include "cli/ssh_session.h"

namespace hvd::cli {

class RemoteAgent {
 public:
  enum class State { kStarting, kStarted, kEnded };

  // `say` prints progress lines (may be null). `command` runs there; `token` is its first line
  // of stdin.
  RemoteAgent(SshTarget target, std::string command, std::string token,
              std::function<void(const std::string&)> say);
  ~RemoteAgent();  // Stop()
  RemoteAgent(const RemoteAgent&) = delete;
  RemoteAgent& operator=(const RemoteAgent&) = delete;

  void Begin();
  // kEnded: *why says what happened, naming the host and the step (empty after a clean Stop).
  State state(std::string* why) const;
  // The agent's last log lines.
  std::string Tail() const;
  // Closes the agent's stdin, waits up to `grace` for it to exit, disconnects. Idempotent.
  void Stop(std::chrono::milliseconds grace);

 private:
  void Run();
  void Relay(const std::string& text);
  void End(const std::string& why);

  const SshTarget target_;
  const std::string command_, token_;
  const std::function<void(const std::string&)> say_;

  mutable base::Mutex mu_;
  base::CondVar cv_;
  State state_ HVD_GUARDED_BY(mu_) = State::kStarting;
  std::string why_ HVD_GUARDED_BY(mu_);
  std::string where_ HVD_GUARDED_BY(mu_);  // "user@host:port" once connected
  std::deque<std::string> tail_ HVD_GUARDED_BY(mu_);
  std::string partial_ HVD_GUARDED_BY(mu_);  // a line not yet ended
  bool stop_ HVD_GUARDED_BY(mu_) = false;
  std::chrono::milliseconds grace_ HVD_GUARDED_BY(mu_){0};
  std::thread thread_;
};

}  // namespace hvd::cli
