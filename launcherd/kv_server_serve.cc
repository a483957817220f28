// KvServer, second half: what the loop does with a request, a finished wait, a deadline, a reply
// and a closing connection. Every function here runs on the loop thread.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "base/mutex.h"
#include "launcherd/kv_server_impl.h"

namespace hvd::launcherd::kvserver {

Status KvServerImpl::Hello(const kv::Request& req, std::string* prefix) {
  if (req.op != kv::Op::kHello) {
    return PermissionDenied(
        "the first request on a rendezvous connection must be HELLO with the job's secret, not " +
        kv::OpName(req.op));
  }
  if (req.version != kv::kProtocolVersion) {
    return FailedPrecondition("the rank speaks rendezvous protocol version " +
                              std::to_string(req.version) + ", this launcher version " +
                              std::to_string(kv::kProtocolVersion) +
                              "; use libhvd and hvd-launcherd from the same release");
  }
  if (req.secret.empty()) {
    return PermissionDenied("HELLO carried no job secret; set HVD_JOB_SECRET to the job's secret");
  }
  std::string granted;
  if (!resolver_ || !resolver_(req.secret, &granted)) {
    return PermissionDenied(
        "the job secret (HVD_JOB_SECRET) is not one this launcher issued, or its job has ended; "
        "ranks get it from hvd-agent");
  }
  // An empty prefix would grant every job's keys; refuse rather than trust a resolver bug.
  if (granted.empty()) return Internal("the launcher resolved a job secret to an empty prefix");
  *prefix = std::move(granted);
  return Status::OK();
}

namespace {

Status CheckKey(const std::string& prefix, const std::string& key) {
  if (key.empty() || key.find('\0') != std::string::npos) {
    return InvalidArgument("rendezvous key '" + key + "' is empty or contains a NUL byte");
  }
  if (key.compare(0, prefix.size(), prefix) != 0) {
    return PermissionDenied("key '" + key + "' is outside this job's keys '" + prefix +
                            "...'; a job's secret grants only its own keys (do HVD_JOB_ID and "
                            "HVD_JOB_SECRET belong to the same job?)");
  }
  return Status::OK();
}

}  // namespace

Status KvServerImpl::Handle(const std::string& prefix, const kv::Request& req, kv::Response* resp) {
  switch (req.op) {
    case kv::Op::kSet:
      HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
      return store_->Set(req.key, req.value);
    case kv::Op::kGet:
      HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
      return store_->Get(req.key, &resp->value);
    case kv::Op::kAdd:
      HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
      return store_->Add(req.key, req.delta, &resp->number);
    case kv::Op::kCas:
      HVD_RETURN_IF_ERROR(CheckKey(prefix, req.key));
      return store_->CompareAndSet(req.key, req.expect_absent, req.expected, req.desired,
                                   &resp->swapped, &resp->current, &resp->found);
    case kv::Op::kWait:  // StartWait
    case kv::Op::kHello:
      break;
  }
  return Internal("rendezvous endpoint: unhandled " + kv::OpName(req.op));
}

void KvServerImpl::Serve(Conn& c, const kv::Request& req) {
  if (req.op == kv::Op::kWait) {
    StartWait(c, req);
    return;
  }
  kv::Response resp;
  resp.status = Handle(c.prefix, req, &resp);
  Reply(c, req.op, resp);
}

void KvServerImpl::StartWait(Conn& c, const kv::Request& req) {
  for (const auto& k : req.keys) {
    Status s = CheckKey(c.prefix, k);
    if (!s.ok()) {
      Reply(c, req.op, s);
      return;
    }
  }
  c.state = ConnState::kWaiting;
  ++waiting_;
  c.wait_keys = req.keys;
  c.wait_timeout = std::chrono::milliseconds(
      std::clamp<int64_t>(req.timeout_ms, 0, std::chrono::milliseconds(kMaxWait).count()));
  const uint64_t seq = ++c.wait_seq;
  std::weak_ptr<Mailbox> mailbox = mailbox_;
  const uint64_t id = c.id;
  SetDeadline(c, Clock::now() + c.wait_timeout);
  // The callback may run at once (the keys are there), on this thread, before this returns.
  c.wait_id = store_->WaitAsync(c.wait_keys, [mailbox, id, seq](const Status& s) {
    if (auto box = mailbox.lock()) box->Post(id, seq, s);
  });
}

void KvServerImpl::DeliverWaits() {
  std::vector<Mailbox::Done> done;
  {
    base::MutexLock lock(&mailbox_->mu);
    done.swap(mailbox_->done);
  }
  for (auto& d : done) {
    auto it = conns_.find(d.conn);
    if (it == conns_.end()) continue;  // its client left first
    Conn& c = *it->second;
    if (c.state != ConnState::kWaiting || c.wait_seq != d.seq) continue;
    c.state = ConnState::kReady;
    --waiting_;
    c.wait_id = 0;
    c.wait_keys.clear();
    // For the rank the endpoint is going away, which is what Unavailable means to it.
    if (d.status.code() == StatusCode::kCancelled) d.status = Unavailable(d.status.message());
    Reply(c, kv::Op::kWait, d.status);
  }
}

void KvServerImpl::OnTimer(Conn& c, Clock::time_point now) {
  if (now < c.deadline) {
    SetDeadline(c, c.deadline);
    return;
  }
  if (!c.handshaken) {
    log_timeout_.Warn("rendezvous endpoint " + address_ + ": " + c.peer +
                      " did not finish its TLS handshake within " +
                      std::to_string(options_.hello_timeout.count()) + " ms; closing it");
    {
      base::MutexLock lock(&stats_mu_);
      ++stats_.closed_idle;
      ++stats_.tls_failed;
    }
    Close(c, nullptr);
    return;
  }
  if (!c.out.empty()) {
    log_timeout_.Warn("rendezvous endpoint " + address_ + ": " + c.peer +
                      " did not read its answer within " +
                      std::to_string(options_.io_timeout.count()) + " ms; closing it");
    Close(c, "client stopped reading");
    return;
  }
  switch (c.state) {
    case ConnState::kClosing:
      Close(c, nullptr);
      return;
    case ConnState::kHello:
      log_timeout_.Warn("rendezvous endpoint " + address_ + ": " + c.peer +
                        (!c.handshaken  ? " did not finish its TLS handshake"
                         : c.header_got ? " sent no whole HELLO"
                                        : " sent no HELLO") +
                        " within " + std::to_string(options_.hello_timeout.count()) +
                        " ms; closing it");
      {
        base::MutexLock lock(&stats_mu_);
        ++stats_.closed_idle;
      }
      Close(c, nullptr);
      return;
    case ConnState::kWaiting:
      if (store_->CancelWait(c.wait_id)) {
        c.state = ConnState::kReady;
        --waiting_;
        c.wait_id = 0;
        Reply(c, kv::Op::kWait, store_->WaitTimedOut(c.wait_keys, c.wait_timeout));
        c.wait_keys.clear();
      } else {
        SetDeadline(c, now + std::chrono::seconds(1));  // its result is in the mailbox
      }
      return;
    case ConnState::kReady:
      if (c.header_got > 0 && now < c.frame_started + options_.io_timeout) {
        SetDeadline(c, c.frame_started + options_.io_timeout);
        return;
      }
      {
        base::MutexLock lock(&stats_mu_);
        ++stats_.closed_idle;
      }
      // Whatever part of a request has arrived is dropped unanswered: the notice tells the client
      // it may send it again on a new connection.
      Charge(c, 0);
      Send(c,
           kv::EncodeFrame(kv::EncodeNotice(
               c.header_got > 0 ? "a request was not sent whole within " +
                                      std::to_string(options_.io_timeout.count()) + " ms"
                                : "idle for " + std::to_string(options_.idle_timeout.count()) +
                                      " ms; reconnect when needed")),
           true);
      return;
  }
}

void KvServerImpl::Reply(Conn& c, kv::Op op, const kv::Response& resp, bool then_close) {
  Send(c, kv::EncodeFrame(kv::EncodeResponse(op, resp)), then_close);
}

void KvServerImpl::Send(Conn& c, std::string frame, bool then_close) {
  c.out = std::move(frame);
  c.out_done = 0;
  if (then_close) {
    c.state = ConnState::kClosing;
    if (c.in_unauth) {
      unauth_.erase(c.unauth_pos);
      c.in_unauth = false;
    }
  }
  Charge(c, c.out.size());
  // A refusal over TLS waits for its handshake first (OnTimer's first case bounds that).
  SetDeadline(c, Clock::now() + (!c.handshaken             ? options_.hello_timeout
                                 : then_close && c.refused ? kLinger
                                                           : options_.io_timeout));
  Flush(c);
}

void KvServerImpl::Flush(Conn& c) {
  if (!c.handshaken) return;  // StepHandshake flushes once the handshake is done
  std::string error;
  if (!WriteOut(c, &error)) {
    if (!error.empty()) {
      Close(c, "connection error");
    } else {
      Arm(c, true);
    }
    return;
  }
  Arm(c, false);
  Charge(c, 0);
  const auto now = Clock::now();
  if (c.state == ConnState::kClosing) {
    ShutdownWrite(c);  // the client reads the frame, then EOF; we drain until it closes
    SetDeadline(c, now + kLinger);
  } else if (c.state == ConnState::kReady) {
    SetDeadline(c, now + options_.idle_timeout);
  } else if (c.state == ConnState::kHello) {
    SetDeadline(c, std::min(c.deadline, now + options_.hello_timeout));
  }
}

void KvServerImpl::Close(Conn& c, const char* why) {
  if (c.state == ConnState::kWaiting) {
    // A rank that died or gave up leaves no wait behind.
    store_->CancelWait(c.wait_id);
    --waiting_;
    if (why != nullptr) {
      HVD_LOG(DEBUG) << "rendezvous endpoint " << address_ << ": " << c.peer << " (" << c.prefix
                     << ") left during a WAIT: " << why;
      base::MutexLock lock(&stats_mu_);
      ++stats_.waits_disconnected;
    }
  }
  if (c.in_unauth) unauth_.erase(c.unauth_pos);
  if (c.refused) --refusing_;
  Charge(c, 0);
  if (c.timer_at != Clock::time_point::max()) timers_.erase({c.timer_at, c.id});
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  conns_.erase(c.id);  // closes the socket
}

void KvServerImpl::SetDeadline(Conn& c, Clock::time_point at) {
  c.deadline = at;
  // One timer entry per connection: a later deadline is seen when the earlier entry fires.
  if (c.timer_at != Clock::time_point::max() && c.timer_at <= at) return;
  if (c.timer_at != Clock::time_point::max()) timers_.erase({c.timer_at, c.id});
  c.timer_at = at;
  timers_.insert({at, c.id});
}

void KvServerImpl::Arm(Conn& c, bool want_write) {
  if (c.want_write == want_write) return;
  c.want_write = want_write;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want_write ? EPOLLOUT : 0u);
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
}

void KvServerImpl::Charge(Conn& c, size_t bytes) {
  if (c.prefix.empty()) return;  // before HELLO the frame limit is the bound
  size_t& job = job_charged_[c.prefix];
  job = job - c.charged + bytes;
  charged_ = charged_ - c.charged + bytes;
  c.charged = bytes;
  if (job == 0) job_charged_.erase(c.prefix);
}

void KvServerImpl::Authenticated(Conn& c) {
  c.state = ConnState::kReady;
  if (c.in_unauth) {
    unauth_.erase(c.unauth_pos);
    c.in_unauth = false;
  }
}

void KvServerImpl::UpdateStats() {
  base::MutexLock lock(&stats_mu_);
  stats_.connections = conns_.size();
  stats_.unauthenticated = unauth_.size();
  stats_.waiting = waiting_;
  stats_.buffered_bytes = charged_;
}

}  // namespace hvd::launcherd::kvserver

namespace hvd::launcherd {

Status KvServer::Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                       std::unique_ptr<KvServer>* out) {
  return Start(listen, store, std::move(resolver), KvServerOptions(), out);
}

Status KvServer::Start(const std::string& listen, KvStore* store, SecretResolver resolver,
                       const KvServerOptions& options, std::unique_ptr<KvServer>* out) {
  if (store == nullptr) return InvalidArgument("rendezvous endpoint: no store given");
  if (options.max_connections == 0 || options.max_unauthenticated == 0) {
    return InvalidArgument("rendezvous endpoint: connection limits must be at least 1");
  }
  auto server = std::make_unique<kvserver::KvServerImpl>(store, std::move(resolver), options);
  HVD_RETURN_IF_ERROR(server->Listen(listen));
  *out = std::move(server);
  return Status::OK();
}

}  // namespace hvd::launcherd
