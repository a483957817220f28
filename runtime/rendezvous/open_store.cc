// OpenStore(url): the one place that maps a rendezvous URL to a Store implementation. A new scheme
// is one more entry in kSchemes.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "base/settings.h"
#include "rendezvous/store.h"

namespace hvd::runtime::rendezvous {
namespace {

// The job secret, other than in the environment (JobSecret in store.h says why).
const base::Setting<int64_t> kJobSecretFd(
    "HVD_JOB_SECRET_FD", nullptr, -1,
    "a descriptor holding the job's secret (hvd-agent passes it so; read from offset 0); -1: none");
const base::Setting<std::string> kJobSecretFile(
    "HVD_JOB_SECRET_FILE", nullptr, "",
    "a file holding the job's secret, mode 0600 or stricter (for launchers other than hvd-agent)");
constexpr size_t kMaxSecretBytes = 4096;

std::string TrimNewline(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Reads at most kMaxSecretBytes from `fd` at offset 0 with pread, so that the descriptor stays
// readable by a second Init() and by programs the worker execs (it is not consumed).
Status ReadSecretFd(int fd, const std::string& what, std::string* out) {
  std::string buf(kMaxSecretBytes + 1, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = pread(fd, buf.data() + got, buf.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return FailedPrecondition("reading the job secret from " + what + ": " +
                                std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxSecretBytes) {
    return InvalidArgument("the job secret in " + what + " is longer than " +
                           std::to_string(kMaxSecretBytes) + " bytes");
  }
  buf.resize(got);
  *out = TrimNewline(std::move(buf));
  if (out->empty()) return InvalidArgument("the job secret in " + what + " is empty");
  return Status::OK();
}

Status OpenFile(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out) {
  if (rest.empty() || rest.front() != '/') {
    return InvalidArgument("rendezvous URL '" + url +
                           "': a file store needs an absolute directory (file:///abs/dir)");
  }
  return NewFileStore(std::string(rest), out);
}

// hvd://HOST:PORT, hvd-launcherd's rendezvous endpoint (docs/rendezvous.md).
Status OpenLauncher(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out) {
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  return NewTcpStore(std::string(rest), /*tls=*/false, out);
}

// hvds://HOST:PORT: the same over TLS (a launcher started with --tls-cert).
Status OpenLauncherTls(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out) {
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  return NewTcpStore(std::string(rest), /*tls=*/true, out);
}

struct Scheme {
  std::string_view prefix;  // including "://"
  Status (*open)(const std::string& url, std::string_view rest, std::unique_ptr<Store>* out);
};

constexpr Scheme kSchemes[] = {
    {"file://", &OpenFile},
    {"hvd://", &OpenLauncher},
    {"hvds://", &OpenLauncherTls},
};

}  // namespace

Status JobSecret(std::string* out) {
  out->clear();
  int64_t fd = -1;
  HVD_RETURN_IF_ERROR(kJobSecretFd.Get(&fd));
  if (fd < -1) {  // -5 was read as "none": the error then said HVD_JOB_SECRET was not set
    return InvalidArgument("HVD_JOB_SECRET_FD=" + std::to_string(fd) +
                           " is not a descriptor (0 or above; -1 or unset: none)");
  }
  if (fd >= 0) {
    if (fd > 1 << 20 || fcntl(static_cast<int>(fd), F_GETFD) < 0) {
      // The variable came without the descriptor: most often a process that Python's
      // multiprocessing started with spawn or forkserver (a DataLoader worker) from a rank
      // whose script calls hvd.init() at import: it must not become a rank.
      return FailedPrecondition(
          "HVD_JOB_SECRET_FD=" + std::to_string(fd) +
          " is not an open descriptor in this process: it inherited a rank's variables but not "
          "the descriptor (a process started by Python multiprocessing's spawn or forkserver, "
          "such as a DataLoader worker, re-running a script that calls hvd.init() at import: "
          "call it under `if __name__ == \"__main__\":`), or something closed it");
    }
    return ReadSecretFd(static_cast<int>(fd), "HVD_JOB_SECRET_FD=" + std::to_string(fd), out);
  }
  std::string path;
  HVD_RETURN_IF_ERROR(kJobSecretFile.Get(&path));
  if (!path.empty()) {
    const int f = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f < 0) {
      return FailedPrecondition("HVD_JOB_SECRET_FILE=" + path + ": " + std::strerror(errno));
    }
    struct stat st;
    if (fstat(f, &st) != 0 || (st.st_mode & 077) != 0) {
      close(f);
      return FailedPrecondition("HVD_JOB_SECRET_FILE=" + path +
                                " is readable or writable by others than its owner; chmod 600 it "
                                "(the secret admits anyone to the job's rendezvous)");
    }
    Status s = ReadSecretFd(f, "HVD_JOB_SECRET_FILE=" + path, out);
    close(f);
    return s;
  }
  return Status::OK();
}

Status OpenStore(const std::string& url, std::unique_ptr<Store>* out) {
  if (!url.empty() && url.front() == '/') return NewFileStore(url, out);
  for (const Scheme& s : kSchemes) {
    if (url.compare(0, s.prefix.size(), s.prefix) == 0) {
      return s.open(url, std::string_view(url).substr(s.prefix.size()), out);
    }
  }
  std::string understood = "an absolute directory path";
  for (const Scheme& s : kSchemes) understood += ", " + std::string(s.prefix) + "...";
  return InvalidArgument("rendezvous URL '" + url +
                         "' is not understood; expected one of: " + understood);
}

}  // namespace hvd::runtime::rendezvous
