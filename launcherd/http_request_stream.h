// httplib's Stream over a connection HttpGate found a whole request head on (http_gate.h). It
// reads no more than that request's bytes (head and announced body), so a next request stays in
// the socket for the gate, and every wait ends at one deadline: a client that stops reading
// cannot hold a worker.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

#include "launcherd/http_gate.h"

namespace hvd::launcherd {

class RequestStream final : public httplib::Stream {
 public:
  RequestStream(const GatedRequest& r, std::chrono::milliseconds timeout)
      : fd_(r.fd),
        left_(r.head_bytes + r.body_bytes),
        deadline_(std::chrono::steady_clock::now() + timeout) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  bool Wait(short events) const;  // poll until the deadline

  const int fd_;
  size_t left_;  // of the request's bytes, not yet read from the socket
  const std::chrono::steady_clock::time_point deadline_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

}  // namespace hvd::launcherd
