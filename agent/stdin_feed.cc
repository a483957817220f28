#include "agent/stdin_feed.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <thread>

#include "agent/launcher_client.h"
#include "base/logging.h"
#include "control/grpc_util.h"
#include "hvd/v1/agent.grpc.pb.h"

namespace hvd::agent {
namespace {

class LauncherStdinFeed final : public StdinFeed {
 public:
  LauncherStdinFeed(std::string launcher, std::string token, v1::ReadStdinRequest request, int fd,
                    control::TlsConfig tls)
      : launcher_(std::move(launcher)),
        tls_(std::move(tls)),
        token_(std::move(token)),
        request_(std::move(request)),
        fd_(fd),
        context_(control::NewClientContext(token_)),  // no deadline: the input lasts the job
        thread_([this] { Run(); }) {}

  ~LauncherStdinFeed() override {
    stop_.store(true);
    context_->TryCancel();  // thread-safe; also before the call started (it then fails at once)
    thread_.join();
  }

 private:
  void Run() {
    // A write into a pipe whose reader exited raises SIGPIPE in the writing thread: blocked here,
    // the write fails with EPIPE instead (and the pending signal dies with the thread).
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

    auto stub = v1::AgentGateway::NewStub(control::NewChannel(launcher_, tls_));
    std::unique_ptr<grpc::ClientReader<v1::StdinData>> reader =
        stub->ReadStdin(context_.get(), request_);
    v1::StdinData chunk;
    bool rank_gone = false;
    size_t bytes = 0;
    while (!rank_gone && reader->Read(&chunk)) {
      rank_gone = !WriteAllUntil(fd_, chunk.data(), stop_);
      bytes += chunk.data().size();
    }
    if (rank_gone) context_->TryCancel();
    const grpc::Status status = reader->Finish();
    close(fd_);  // EOF for the rank
    if (!status.ok() && !stop_.load() && !rank_gone &&
        status.error_code() != grpc::StatusCode::ABORTED) {
      HVD_LOG(WARNING) << "job " << request_.job_id() << " rank " << request_.rank()
                       << ": forwarding hvdrun's standard input from the launcher at " << launcher_
                       << " broke after " << bytes << " bytes (" << status.error_message()
                       << "); the rank reads end of file from now on";
    }
  }

  const std::string launcher_;
  const control::TlsConfig tls_;  // plain TCP when not enabled
  const std::string token_;
  const v1::ReadStdinRequest request_;
  const int fd_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<grpc::ClientContext> context_;
  std::thread thread_;  // last: starts once every member above is initialized
};

}  // namespace

bool WriteAllUntil(int fd, std::string_view data, const std::atomic<bool>& stop) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  while (!data.empty()) {
    if (stop.load()) return false;
    const ssize_t n = write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return false;  // EPIPE: the rank (and all it started) is gone
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, 100);  // POLLERR when the reader closed: the next write says EPIPE
  }
  return true;
}

std::unique_ptr<StdinFeed> StartLauncherStdinFeed(const std::string& launcher,
                                                  const std::string& token,
                                                  const std::string& job_id, int attempt, int rank,
                                                  int fd, const control::TlsConfig& tls) {
  v1::ReadStdinRequest request;
  request.set_job_id(job_id);
  request.set_attempt(attempt);
  request.set_rank(rank);
  return std::make_unique<LauncherStdinFeed>(launcher, token, std::move(request), fd, tls);
}

}  // namespace hvd::agent
