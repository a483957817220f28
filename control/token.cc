#include "control/token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "base/hex.h"

namespace hvd::control {

Status ReadTokenFile(const std::string& path, std::string* token) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    // hvdrun and the agents need the launcher's own token; only a launcher starts from a new one.
    return InvalidArgument("token file " + path + ": " + std::strerror(errno) +
                           " (the cluster's token: the file hvd-launcherd --token-file reads, or "
                           "the one it wrote into its --state-dir; for a new launcher, create one "
                           "with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > FILE; "
                           "chmod 600 FILE)");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    return InvalidArgument("token file " + path +
                           " is accessible by group or others; run: chmod 600 " + path);
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  const auto first = line.find_first_not_of(" \t\r\n");
  const auto last = line.find_last_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return InvalidArgument("token file " + path +
                           " is empty; put the cluster token on its first line");
  }
  *token = line.substr(first, last - first + 1);
  return Status::OK();
}

Status WriteNewTokenFile(const std::string& path, std::string* token) {
  *token = RandomHex(32);
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return InvalidArgument("cannot create token file " + path + ": " + std::strerror(errno));
  std::string line = *token + "\n";
  ssize_t n = write(fd, line.data(), line.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return Internal("cannot write token file " + path + ": " + std::strerror(err));
  }
  return Status::OK();
}

std::string RandomHex(size_t bytes) {
  std::random_device rd;  // the kernel's CSPRNG on Linux
  std::string out;
  out.reserve(bytes * 2);
  for (size_t i = 0; i < bytes; ++i) base::AppendHexByte(static_cast<uint8_t>(rd() & 0xff), &out);
  return out;
}

bool TokensEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace hvd::control
