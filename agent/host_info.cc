#include "agent/host_info.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/net.h"

namespace hvd::agent {

Status LocalAddressTowards(const std::string& host_port, std::string* address) {
  base::HostPort launcher;
  HVD_RETURN_IF_ERROR(base::ParseHostPort(host_port, &launcher));
  const std::string& host = launcher.host;
  const int port = launcher.port;
  // IPv4 first: HVD_ADVERTISE_ADDR is documented as an IPv4 address.
  for (int family : {AF_INET, AF_UNSPEC}) {
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      if (family == AF_UNSPEC) {
        return Unavailable("cannot resolve launcher host '" + host + "': " + gai_strerror(rc));
      }
      continue;
    }
    Status last = Unavailable("no address for launcher host '" + host + "'");
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      char text[INET6_ADDRSTRLEN] = {};
      if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
          getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof text, nullptr, 0,
                      NI_NUMERICHOST) == 0) {
        close(fd);
        freeaddrinfo(res);
        *address = text;
        return Status::OK();
      }
      last = Unavailable("no route from this host to launcher " + host_port + ": " +
                         std::strerror(errno));
      close(fd);
    }
    freeaddrinfo(res);
    if (family == AF_UNSPEC) return last;
  }
  return Unavailable("cannot find a local address towards " + host_port);
}

int CountNvidiaDevices(const std::string& dev_dir) {
  DIR* d = opendir(dev_dir.c_str());
  if (d == nullptr) return 0;
  int count = 0;
  while (dirent* e = readdir(d)) {
    // "nvidia0", "nvidia1", ...; not nvidiactl, nvidia-uvm, nvidia-modeset.
    const char* n = e->d_name;
    if (std::strncmp(n, "nvidia", 6) != 0 || n[6] == '\0') continue;
    bool digits = true;
    for (const char* p = n + 6; *p != '\0'; ++p) digits = digits && *p >= '0' && *p <= '9';
    if (digits) ++count;
  }
  closedir(d);
  return count;
}

std::vector<std::string> GpuIds(int device_count, const char* cuda_visible_devices) {
  std::vector<std::string> ids;
  if (cuda_visible_devices != nullptr) {
    std::string v(cuda_visible_devices);
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = std::min(v.find(',', start), v.size());
      std::string id = v.substr(start, comma - start);
      const size_t b = id.find_first_not_of(" \t"), e = id.find_last_not_of(" \t");
      if (b != std::string::npos) {
        id = id.substr(b, e - b + 1);
        if (id[0] == '-') break;  // CUDA stops at an invalid id ("-1" hides every GPU)
        ids.push_back(id);
      }
      start = comma + 1;
    }
    return ids;
  }
  for (int i = 0; i < device_count; ++i) ids.push_back(std::to_string(i));
  return ids;
}

std::string CudaDeviceForSlot(const std::vector<std::string>& gpus, int slot) {
  if (gpus.empty() || slot < 0) return "";
  return gpus[static_cast<size_t>(slot) % gpus.size()];
}

bool CudaVisibleDevicesFor(const std::vector<std::string>& gpus, int slot, int local_rank,
                           bool isolate, std::string* value) {
  value->clear();
  if (gpus.empty() || slot < 0) return false;
  if (isolate) {
    *value = CudaDeviceForSlot(gpus, slot);
    return true;
  }
  const int n = static_cast<int>(gpus.size());
  if (local_rank < 0 || local_rank >= n) return false;
  const int shift = ((slot % n) - local_rank + n) % n;
  if (shift == 0) return false;
  for (int i = 0; i < n; ++i) {
    if (i > 0) *value += ",";
    *value += gpus[static_cast<size_t>((i + shift) % n)];
  }
  return true;
}

}  // namespace hvd::agent
