#include "cli/stdin_forward.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include "control/grpc_util.h"
#include "hvd/v1/launcher.grpc.pb.h"

namespace hvd::cli {
namespace {

constexpr size_t kChunk = 64 << 10;
constexpr int kPollMs = 100;  // how soon Stop() is noticed while nothing arrives

// Whether reading the terminal `fd` now would stop hvdrun (SIGTTIN): it is a terminal and hvdrun
// is not in its foreground process group.
bool InBackgroundOf(int fd) {
  if (!isatty(fd)) return false;
  const pid_t fg = tcgetpgrp(fd);
  return fg >= 0 && fg != getpgrp();
}

}  // namespace

std::unique_ptr<StdinForwarder> StdinForwarder::Start(
    const std::string& address, const std::string& token, const std::string& job_id, int fd,
    std::function<void(const std::string&)> on_error, const control::TlsConfig& tls) {
  std::unique_ptr<StdinForwarder> f(new StdinForwarder());
  f->on_error_ = std::move(on_error);
  f->tls_ = tls;
  // Made here, so that Stop() can cancel it whatever the thread is doing.
  std::shared_ptr<grpc::ClientContext> context = control::NewClientContext(token);
  f->context_ = context;
  f->thread_ = std::thread(&StdinForwarder::Run, f.get(), address, token, job_id, fd);
  return f;
}

StdinForwarder::~StdinForwarder() {
  Stop();
}

void StdinForwarder::Stop() {
  stop_.store(true);
  static_cast<grpc::ClientContext*>(context_.get())->TryCancel();
  if (thread_.joinable()) thread_.join();
}

void StdinForwarder::Run(std::string address, std::string token, std::string job_id, int fd) {
  auto* context = static_cast<grpc::ClientContext*>(context_.get());
  auto stub = v1::Launcher::NewStub(control::NewChannel(address, tls_));
  v1::WriteStdinResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::StdinData>> writer = stub->WriteStdin(context, &response);
  v1::StdinData first;
  first.set_job_id(job_id);
  bool open = writer->Write(first);  // false: the launcher refused or the job already ended
  std::string buf(kChunk, '\0');
  while (open && !stop_.load()) {
    if (InBackgroundOf(fd)) {
      poll(nullptr, 0, kPollMs);
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, kPollMs);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    const ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;  // end of input (or an unreadable one, e.g. closed: the same for the rank)
    v1::StdinData chunk;
    chunk.set_data(buf.data(), static_cast<size_t>(n));
    // Waits while the launcher's buffer for the job is full; false once the job has ended.
    open = writer->Write(chunk);
  }
  if (open && !stop_.load()) writer->WritesDone();
  // Returns once the rank has read everything or the job has ended; Stop() cancels it.
  const grpc::Status status = writer->Finish();
  if (!status.ok() && !stop_.load() && status.error_code() != grpc::StatusCode::CANCELLED &&
      on_error_) {
    on_error_("standard input not forwarded: " + status.error_message());
  }
}

}  // namespace hvd::cli
