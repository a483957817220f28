// The file Store: one file per key in a directory that every participant sees.
//
// Keys are percent-encoded into file names ("a/b:c" -> "k_a%2Fb%3Ac") so any printable key is a
// single flat file. Set writes a temp file and renames it over the key's file: rename(2) is atomic,
// so a reader sees the old value, the new value or nothing, never a partial one. fsync is skipped
// on purpose: the store holds rendezvous data for one job, not data that must survive a crash.
// Add is a read-modify-write under flock(2) on a per-key lock file, which serializes it across
// threads (each call opens its own file description) and processes.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <random>
#include <thread>

#include "base/errno_text.h"
#include "base/hex.h"
#include "base/kv_counter.h"
#include "rendezvous/store.h"
#include "rendezvous/store_util.h"

namespace hvd::runtime::rendezvous {
namespace {

using base::ErrnoText;

// Long keys would exceed NAME_MAX (255); they keep a readable head plus a hash of the whole key.
constexpr size_t kMaxEncoded = 200;

std::string EncodeKey(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      base::AppendHexByte(c, &out, /*upper=*/true);
    }
  }
  if (out.size() <= kMaxEncoded) return out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char tail[20];
  snprintf(tail, sizeof(tail), "%%~%016llx", static_cast<unsigned long long>(h));
  return out.substr(0, kMaxEncoded - 20) + tail;  // '~' never appears unencoded: no collisions
}

// mkdir -p: creates every missing component of the absolute path `dir`.
Status MakeDirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      return Unavailable("file store: cannot create directory " + part + ": " + ErrnoText(errno));
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return Unavailable("file store: cannot stat " + dir + ": " + ErrnoText(errno));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("file store: " + dir + " is not a directory");
  if (access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Unavailable("file store: directory " + dir + " is not writable: " + ErrnoText(errno));
  }
  return Status::OK();
}

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)), name_("file store " + dir_) {}

  Status Set(std::string_view key, std::string_view value) override {
    return WriteAtomic(key, value);
  }

  Status Get(std::string_view key, std::string* value) override {
    std::string path = KeyPath(key);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return NotFound(name_ + ": key '" + std::string(key) + "' not set");
      return Unavailable(name_ + ": open " + path + ": " + ErrnoText(errno));
    }
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t r = read(fd, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        int err = errno;
        close(fd);
        return Unavailable(name_ + ": read " + path + ": " + ErrnoText(err));
      }
      if (r == 0) break;
      out.append(buf, static_cast<size_t>(r));
    }
    close(fd);
    *value = std::move(out);
    return Status::OK();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    using std::chrono::milliseconds;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    // Short first polls keep a local rendezvous fast; the cap bounds load on a shared file system.
    milliseconds backoff(1);
    std::vector<std::string> missing;
    for (;;) {
      missing.clear();
      for (const auto& k : keys) {
        if (access(KeyPath(k).c_str(), F_OK) != 0) missing.push_back(k);
      }
      if (missing.empty()) return Status::OK();
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return internal::WaitTimedOut(name_, timeout.count(), missing);
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(backoff, deadline - now));
      backoff = std::min(backoff * 2, milliseconds(50));
    }
  }

  Status Add(std::string_view key, int64_t delta, int64_t* new_value) override {
    std::string lock_path = dir_ + "/l_" + EncodeKey(key);
    int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) return Unavailable(name_ + ": open " + lock_path + ": " + ErrnoText(errno));
    Status s = LockedAdd(lock_fd, lock_path, key, delta, new_value);
    close(lock_fd);  // releases the flock
    return s;
  }

  std::string Describe() const override { return name_; }

 private:
  std::string KeyPath(std::string_view key) const { return dir_ + "/k_" + EncodeKey(key); }

  Status LockedAdd(int lock_fd, const std::string& lock_path, std::string_view key, int64_t delta,
                   int64_t* new_value) {
    while (flock(lock_fd, LOCK_EX) != 0) {
      if (errno != EINTR)
        return Unavailable(name_ + ": flock " + lock_path + ": " + ErrnoText(errno));
    }
    int64_t value = 0;
    std::string text;
    Status s = Get(key, &text);
    if (s.ok()) {
      HVD_RETURN_IF_ERROR(base::ParseCounter(name_, key, text, &value));
    } else if (s.code() != StatusCode::kNotFound) {
      return s;
    }
    int64_t sum = 0;
    HVD_RETURN_IF_ERROR(base::AddCounter(name_, key, value, delta, &sum));
    HVD_RETURN_IF_ERROR(WriteAtomic(key, std::to_string(sum)));
    if (new_value != nullptr) *new_value = sum;
    return Status::OK();
  }

  Status WriteAtomic(std::string_view key, std::string_view value) {
    std::string tmp = TempPath();
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Unavailable(name_ + ": create " + tmp + ": " + ErrnoText(errno));
    size_t done = 0;
    while (done < value.size()) {
      ssize_t w = write(fd, value.data() + done, value.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        int err = errno;
        close(fd);
        unlink(tmp.c_str());
        return Unavailable(name_ + ": write " + tmp + ": " + ErrnoText(err));
      }
      done += static_cast<size_t>(w);
    }
    if (close(fd) != 0) {
      int err = errno;
      unlink(tmp.c_str());
      return Unavailable(name_ + ": close " + tmp + ": " + ErrnoText(err));
    }
    std::string path = KeyPath(key);
    if (rename(tmp.c_str(), path.c_str()) != 0) {
      int err = errno;
      unlink(tmp.c_str());
      return Unavailable(name_ + ": rename " + tmp + " to " + path + ": " + ErrnoText(err));
    }
    return Status::OK();
  }

  // Unique across threads (counter), processes (pid) and hosts sharing the directory (nonce).
  std::string TempPath() const {
    static const uint64_t nonce = std::random_device{}() * 0x9E3779B97F4A7C15ull;
    static std::atomic<uint64_t> counter{0};
    char name[80];
    snprintf(name, sizeof(name), "/.t_%d_%016llx_%llu", static_cast<int>(getpid()),
             static_cast<unsigned long long>(nonce),
             static_cast<unsigned long long>(counter.fetch_add(1)));
    return dir_ + name;
  }

  const std::string dir_;
  const std::string name_;
};

}  // namespace

Status NewFileStore(const std::string& dir, std::unique_ptr<Store>* out) {
  if (dir.empty() || dir.front() != '/') {
    return InvalidArgument("file store: directory '" + dir + "' is not an absolute path");
  }
  std::string clean = dir;
  while (clean.size() > 1 && clean.back() == '/') clean.pop_back();
  HVD_RETURN_IF_ERROR(MakeDirs(clean));
  *out = std::make_unique<FileStore>(std::move(clean));
  return Status::OK();
}

}  // namespace hvd::runtime::rendezvous
