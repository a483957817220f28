// hvdrun's standard input to the job's stdin rank (--stdin, rank 0 by default), as mpirun and
// horovodrun forward it: a thread reads fd 0 in chunks of 64 KiB and streams them to the
// launcher (Launcher.WriteStdin, launcherd/stdin_service.h), which hands them to that rank's
// agent; the end of hvdrun's input is the rank's EOF. Memory stays bounded: a write waits while
// the launcher's buffer for the job is full (gRPC flow control), so hvdrun stops reading a fast
// producer until the rank catches up. When the job ends, Stop() stops reading at once (a rank
// that never read its input does not keep hvdrun waiting). While hvdrun runs in the background
// of a terminal (another process group owns it) it leaves the terminal alone instead of being
// stopped by SIGTTIN, as mpirun does, and reads once it is in the foreground.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "control/tls.h"

namespace hvd::cli {

class StdinForwarder {
 public:
  // Starts forwarding `fd` for `job_id` to the launcher at `address`. `on_error` hears (once,
  // from the forwarding thread) why the input could not be forwarded, when it could not.
  static std::unique_ptr<StdinForwarder> Start(const std::string& address, const std::string& token,
                                               const std::string& job_id, int fd,
                                               std::function<void(const std::string&)> on_error,
                                               const control::TlsConfig& tls = {});
  ~StdinForwarder();  // Stop()
  // Stops reading (within 100 ms), cancels the call and joins the thread. Idempotent.
  void Stop();

 private:
  StdinForwarder() = default;
  void Run(std::string address, std::string token, std::string job_id, int fd);

  std::atomic<bool> stop_{false};
  std::function<void(const std::string&)> on_error_;
  control::TlsConfig tls_;  // the Client's (plain TCP when not enabled)
  std::shared_ptr<void> context_;  // grpc::ClientContext, kept opaque to the header
  std::thread thread_;
};

}  // namespace hvd::cli
