// A real OpenSSH server for the SSH bootstrap tests, on one namespace host's address: a host key
// and a user key generated for the test (ssh-keygen), an authorized_keys file and a config in the
// test's directory, root login with keys only. Nothing of the machine's own SSH setup (~/.ssh,
// /etc/ssh) is read or written. sshd needs its privilege separation directory /run/sshd; where the
// machine has none, it gets a private /run (a tmpfs in the mount namespace `ip netns exec`
// creates for it), so nothing is left behind.
#pragma once

#include <memory>
#include <string>

#include "hvd/status.h"
#include "tests/cluster/hvd_netns.h"

namespace hvd::clustertest {

// ssh-keygen -t ed25519 into `path` (and path.pub), no passphrase.
Status GenerateKey(const std::string& path);
// The "TYPE BASE64" part of a .pub file.
Status PublicKey(const std::string& pub_path, std::string* key);

class TestSshd {
 public:
  static constexpr int kPort = 2222;

  // Starts sshd in host i's namespace of `cluster`, accepting `user_key_pub` for root; files go
  // to `dir`. Waits (bounded) until it accepts connections.
  static Status Start(HvdNetnsCluster* cluster, int host, const std::string& dir,
                      const std::string& user_key_pub, std::unique_ptr<TestSshd>* out);
  ~TestSshd();  // Stop()

  // "[10.77.0.11]:2222 ssh-ed25519 AAAA...": its known_hosts line.
  const std::string& known_hosts_line() const { return known_hosts_line_; }
  // SIGTERM, bounded wait (then SIGKILL); idempotent. sshd's log when it misbehaved.
  std::string Stop();

 private:
  TestSshd() = default;
  std::unique_ptr<clitest::Proc> proc_;
  std::string known_hosts_line_;
};

}  // namespace hvd::clustertest
