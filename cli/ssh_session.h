// One SSH connection (libssh) that runs one remote command, for hvdrun --ssh. Every step is
// bounded by the connect timeout, and every error names the destination and the step:
//   "ssh root@gpu2:22: connect: Connection refused"
//   "ssh root@gpu2:22: host key: ... is not in /home/u/.ssh/known_hosts ..."
//   "ssh root@gpu2:22: authenticate: the server refused key /home/u/.ssh/id_ed25519 ..."
// Host keys are checked against known_hosts and never accepted or written on the fly: an unknown
// or changed key is an error that says how to check and record it.
//
// Not thread-safe (libssh sessions are not): one thread owns a session.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "hvd/status.h"

namespace hvd::cli {

struct SshTarget {
  std::string host;
  int port = 22;
  std::string user;         // "": the current user (or ~/.ssh/config's)
  std::string identity;     // private key file; "": the ssh-agent and ~/.ssh's default keys
  std::string known_hosts;  // "": ~/.ssh/known_hosts
  std::chrono::seconds timeout{10};
};

class SshSession {
 public:
  // Connects, checks the host key, authenticates.
  static Status Connect(const SshTarget& target, std::unique_ptr<SshSession>* out);
  ~SshSession();
  SshSession(const SshSession&) = delete;
  SshSession& operator=(const SshSession&) = delete;

  // "root@gpu2:22", for messages.
  const std::string& where() const { return where_; }
  // "ssh-ed25519 SHA256:..." of the server's verified key.
  const std::string& host_key() const { return host_key_; }

  // Runs `command` through the remote user's shell and writes `stdin_line` + "\n" to its stdin.
  Status Exec(const std::string& command, const std::string& stdin_line);
  // Waits up to `timeout` for output and appends what came (stdout and stderr together, as the
  // remote command writes its log to stderr). False once the command has ended and everything
  // was read; then exit_status() tells how it ended.
  bool Read(std::chrono::milliseconds timeout, std::string* output);
  // Closes the command's stdin (EOF).
  void CloseStdin();
  // The remote command's exit status; -1 when unknown (killed without one, connection lost).
  int exit_status();

 private:
  SshSession() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string where_, host_key_;
};

// The text a POSIX shell reads back as exactly `s` (single-quoted).
std::string ShellQuote(const std::string& s);

// Whether this build can run hvdrun --ssh (it needs libssh and the embedded launcher).
bool HaveSshBootstrap();

}  // namespace hvd::cli
