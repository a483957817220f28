#include "transport/connect.h"

#include "transport/link_transport.h"

namespace hvd::runtime::transport {

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
  std::vector<int> local = options.use_shm ? SameHost(options.hosts, rank) : std::vector<int>{rank};
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
