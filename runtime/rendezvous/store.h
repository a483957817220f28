// Rendezvous: how ranks that know nothing but an address find each other.
//
// A Store is a small key-value space shared by every rank of one job (gloo's rendezvous::Store).
// Keys are printable strings without NUL; values are arbitrary bytes (an NCCL unique id, an
// address). Implementations:
//   - memory store: one process, many threads (tests);
//   - file store:   a directory on a shared or local file system; several processes meet without
//                   any daemon (hvdrun-less runs, tests);
//   - tcp store:    hvd://HOST:PORT, hvd-launcherd's rendezvous endpoint, over the small framed
//                   protocol of base/kv_protocol.h (libhvd.so never links gRPC;
//                   docs/rendezvous.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::runtime::rendezvous {

class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  virtual ~Store() = default;

  // Sets `key` to `value`, replacing any earlier value. Visible to every rank once it returns.
  virtual Status Set(std::string_view key, std::string_view value) = 0;

  // NotFound when `key` is absent.
  virtual Status Get(std::string_view key, std::string* value) = 0;

  // Waits until every key in `keys` exists. DeadlineExceeded after `timeout`, with a message that
  // lists the keys still missing (callers translate keys to the ranks that did not show up).
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Atomically adds `delta` to the integer at `key` (absent counts as 0); *new_value gets the
  // result. Values written by Set() that are not decimal integers give InvalidArgument.
  virtual Status Add(std::string_view key, int64_t delta, int64_t* new_value) = 0;

  // "file store /tmp/hvd-rdzv-1234", for error messages.
  virtual std::string Describe() const = 0;
};

// A store whose keys are all prefixed with `prefix` + "/", over `base` (not owned, must outlive).
// Used to scope keys by job and attempt so a restarted job never reads stale keys.
std::unique_ptr<Store> NewPrefixStore(std::string prefix, Store* base);

// Thread-safe in-process store.
std::unique_ptr<Store> NewMemoryStore();

// A store in directory `dir` (created if missing). Writes are atomic (temp file + rename); Add is
// serialized with flock(2). REQUIRES: every participant sees the same directory.
Status NewFileStore(const std::string& dir, std::unique_ptr<Store>* out);

// Opens a store from a URL: "file:///abs/dir", a plain absolute directory path, or
// "hvd://HOST:PORT" (hvd-launcherd; authenticates with HVD_JOB_SECRET). Unknown schemes
// give InvalidArgument naming the URL and the schemes understood.
Status OpenStore(const std::string& url, std::unique_ptr<Store>* out);

// The hvd:// store (tcp_store.cc): connects to the launcher's endpoint `address` ("HOST:PORT"),
// retrying until HVD_RENDEZVOUS_TIMEOUT_SECONDS, and authenticates with the job secret (JobSecret
// below, else HVD_JOB_SECRET). OpenStore("hvd://HOST:PORT") calls it; "hvds://HOST:PORT" with
// `tls`: TLS, the launcher's certificate checked against HVD_RENDEZVOUS_CA (tls_channel.h).
Status NewTcpStore(const std::string& address, bool tls, std::unique_ptr<Store>* out);

// The job secret an hvd:// store authenticates with when it is not in the environment: from
// HVD_JOB_SECRET_FD (a descriptor, read with pread from offset 0, as hvd-agent passes it: the
// secret is then in no process's environment, where /proc/<pid>/environ, `ps e` and every child
// would show it), else HVD_JOB_SECRET_FILE (a file of mode 0600 or stricter). Empty when neither
// is set; the store then reads HVD_JOB_SECRET (ranks started by hand).
Status JobSecret(std::string* out);

}  // namespace hvd::runtime::rendezvous
