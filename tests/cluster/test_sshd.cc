#include "tests/cluster/test_sshd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

namespace hvd::clustertest {

Status GenerateKey(const std::string& path) {
  return NetnsCluster::Run(
      {"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "hvd-test", "-f", path});
}

Status PublicKey(const std::string& pub_path, std::string* key) {
  std::ifstream in(pub_path);
  std::string type, base64;
  if (!(in >> type >> base64)) return Internal("cannot read the public key " + pub_path);
  *key = type + " " + base64;
  return Status::OK();
}

Status TestSshd::Start(HvdNetnsCluster* cluster, int host, const std::string& dir,
                       const std::string& user_key_pub, std::unique_ptr<TestSshd>* out) {
  std::unique_ptr<TestSshd> d(new TestSshd());
  const std::string base = dir + "/sshd-" + std::to_string(host);
  const std::string addr = cluster->net().host_addr(host);
  HVD_RETURN_IF_ERROR(GenerateKey(base + "-hostkey"));
  std::string host_key, user_key;
  HVD_RETURN_IF_ERROR(PublicKey(base + "-hostkey.pub", &host_key));
  HVD_RETURN_IF_ERROR(PublicKey(user_key_pub, &user_key));
  d->known_hosts_line_ = "[" + addr + "]:" + std::to_string(kPort) + " " + host_key;
  clitest::WriteFile(base + "-authorized_keys", user_key + "\n", 0600);
  // StrictModes off: the files live under /tmp, which is world-writable.
  clitest::WriteFile(base + "-config",
                     "ListenAddress " + addr + "\nPort " + std::to_string(kPort) + "\nHostKey " +
                         base + "-hostkey\nAuthorizedKeysFile " + base +
                         "-authorized_keys\nPidFile none\nStrictModes no\nUsePAM no\n"
                         "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                         "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
                         "LogLevel VERBOSE\n",
                     0600);
  const std::string script =
      "[ -d /run/sshd ] || { mount -t tmpfs -o mode=0755 hvd-test-run /run && mkdir -m 0755 "
      "/run/sshd; } || exit 3; exec /usr/sbin/sshd -D -e -f '" +
      base + "-config'";
  d->proc_ = cluster->StartIn(cluster->net().host_ns(host), {"/bin/sh", "-c", script});
  // Ready once it accepts a connection on its address.
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(kPort);
  inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  const bool up = WaitUntil(
      [&] {
        int fd = -1;
        if (!NetnsCluster::SocketIn(cluster->net().host_ns(host), &fd).ok()) return false;
        const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
        close(fd);
        return ok || !clitest::ProcessAlive(d->proc_->pid());
      },
      std::chrono::seconds(10));
  if (!up || !clitest::ProcessAlive(d->proc_->pid())) {
    return Unavailable("sshd on " + addr + ":" + std::to_string(kPort) +
                       " did not start; its log: " + d->proc_->Err());
  }
  *out = std::move(d);
  return Status::OK();
}

TestSshd::~TestSshd() {
  Stop();
}

std::string TestSshd::Stop() {
  if (!proc_) return "";
  proc_->Signal(SIGTERM);
  clitest::ProcResult r = proc_->Wait(std::chrono::seconds(10));
  proc_.reset();
  return r.timed_out ? "sshd ignored SIGTERM; its log: " + r.err : "";
}

}  // namespace hvd::clustertest
