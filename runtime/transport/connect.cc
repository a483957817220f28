#include "transport/connect.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>

#include "base/logging.h"
#include "transport/link_transport.h"

namespace hvd::runtime::transport {
namespace {

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "?" : line;
}

std::string NamespaceOf(const char* path) {
  char buf[128];
  const ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
}

std::string IdentityKey(const std::string& scope, int rank) {
  return scope + "/identity/" + std::to_string(rank);
}

// Publishes this rank's shared-memory identity and reads those of the ranks that share its host
// name; *local gets the ones that share the identity too. One Set and one Wait, only when there
// is somebody to share memory with.
Status SplitByIdentity(rendezvous::Store& store, int rank, const std::vector<int>& same_host,
                       const ConnectOptions& options, std::vector<int>* local) {
  const std::string mine = options.shm_identity.empty() ? LocalShmIdentity() : options.shm_identity;
  const std::string& scope = options.shm.scope;
  HVD_RETURN_IF_ERROR_CTX(store.Set(IdentityKey(scope, rank), mine),
                          "publishing this rank's shared-memory identity");
  std::vector<std::string> keys;
  for (int r : same_host) keys.push_back(IdentityKey(scope, r));
  Status s = store.Wait(keys, options.shm.connect_timeout);
  if (s.code() == StatusCode::kDeadlineExceeded) {
    std::string missing;
    for (int r : same_host) {
      std::string v;
      if (!store.Get(IdentityKey(scope, r), &v).ok()) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    return DeadlineExceeded("ranks " + missing + " share this rank's host name '" +
                            options.hosts[rank] +
                            "' but did not publish a shared-memory identity "
                            "within the start timeout (are they running?)");
  }
  HVD_RETURN_IF_ERROR_CTX(s, "waiting for the shared-memory identities of this host's ranks");
  std::vector<std::string> identities(same_host.size());
  for (size_t i = 0; i < same_host.size(); ++i) {
    HVD_RETURN_IF_ERROR(store.Get(keys[i], &identities[i]));
  }
  *local = SameIdentity(same_host, identities, rank);
  if (local->size() == same_host.size()) return Status::OK();
  // A notice, once per process: the job works, over TCP, but the host names are misleading.
  static std::atomic<bool> told{false};
  if (!told.exchange(true)) {
    std::string others;
    for (size_t i = 0; i < same_host.size(); ++i) {
      if (identities[i] == mine) continue;
      others += (others.empty() ? "" : "; ") + std::string("rank ") + std::to_string(same_host[i]) +
                " is in " + identities[i];
    }
    HVD_LOG(WARNING) << "ranks share the host name '" << options.hosts[rank]
                     << "' but not a kernel or namespaces (this rank is in " << mine << "; "
                     << others << "): they talk over TCP, not shared memory. Give every "
                     << "machine, container or pod its own name (hvd-agent --host, "
                     << "HVD_HOSTNAME) to make the topology right too.";
  }
  return Status::OK();
}

}  // namespace

std::string LocalShmIdentity() {
  if (const char* fake = std::getenv("HVD_TEST_SHM_IDENTITY"); fake != nullptr && *fake != 0) {
    return std::string("test:") + fake;
  }
  return "boot=" + ReadFirstLine("/proc/sys/kernel/random/boot_id") + " " +
         NamespaceOf("/proc/self/ns/ipc") + " " + NamespaceOf("/proc/self/ns/net");
}

std::vector<int> SameIdentity(const std::vector<int>& same_host,
                              const std::vector<std::string>& identities, int rank) {
  std::string mine;
  for (size_t i = 0; i < same_host.size(); ++i) {
    if (same_host[i] == rank) mine = identities[i];
  }
  std::vector<int> out;
  for (size_t i = 0; i < same_host.size(); ++i) {
    if (identities[i] == mine) out.push_back(same_host[i]);
  }
  return out;
}

std::vector<int> SameHost(const std::vector<std::string>& hosts, int rank) {
  std::vector<int> local;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] == hosts[rank]) local.push_back(static_cast<int>(r));
  }
  return local;
}

Status Connect(rendezvous::Store& store, int rank, int size, const ConnectOptions& options,
               std::unique_ptr<Transport>* out) {
  if (size < 1 || rank < 0 || rank >= size || options.hosts.size() != static_cast<size_t>(size)) {
    return InvalidArgument("transport: rank " + std::to_string(rank) + " of size " +
                           std::to_string(size) + " with " + std::to_string(options.hosts.size()) +
                           " host names");
  }
  std::vector<int> local{rank};
  if (options.use_shm) {
    const std::vector<int> same_host = SameHost(options.hosts, rank);
    if (same_host.size() > 1) {
      HVD_RETURN_IF_ERROR(SplitByIdentity(store, rank, same_host, options, &local));
    }
  }
  std::vector<bool> remote(size, true);
  for (int r : local) remote[r] = false;

  auto abort = std::make_shared<AbortState>();
  std::vector<std::unique_ptr<PollableLink>> links, tcp_links;
  HVD_RETURN_IF_ERROR(shm::ConnectLinks(store, rank, size, local, options.shm, abort, &links));
  HVD_RETURN_IF_ERROR(tcp::ConnectLinks(store, rank, size, options.tcp, remote, abort, &tcp_links));
  for (int p = 0; p < size; ++p) {
    if (tcp_links[p] != nullptr) links[p] = std::move(tcp_links[p]);
  }
  *out = NewLinkTransport(rank, size, std::move(links), std::move(abort),
                          SpinFor(local.size(), options.shm.spin));
  return Status::OK();
}

}  // namespace hvd::runtime::transport
