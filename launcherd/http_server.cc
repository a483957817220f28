#include "launcherd/http_server.h"

#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

#include <arpa/inet.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "control/log_escape.h"
#include "control/status_json.h"
#include "control/token.h"
#include "launcherd/http_request_stream.h"
#include "launcherd/https_front.h"
#include "launcherd/listen_address.h"

namespace hvd::launcherd {
namespace {

using nlohmann::json;

constexpr JobState kJobStates[] = {JobState::kPending,   JobState::kStarting, JobState::kRunning,
                                   JobState::kSucceeded, JobState::kFailed,   JobState::kCancelled,
                                   JobState::kRestarting};

// ?state=RUNNING, ?state=running,pending: the states asked for. InvalidArgument naming the valid
// ones for anything else.
Status ParseStateFilter(const std::string& value, std::set<JobState>* states) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    std::string name = value.substr(start, comma - start);
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    bool found = false;
    for (JobState st : kJobStates) {
      if (name == control::JobStateName(st)) {
        states->insert(st);
        found = true;
      }
    }
    if (!found) {
      std::string valid;
      for (JobState st : kJobStates) {
        valid += (valid.empty() ? "" : ", ") + std::string(control::JobStateName(st));
      }
      return InvalidArgument("'" + name + "' in ?state=" + value + " is not a job state; use " +
                             valid + " (any case, several separated by commas)");
    }
    start = comma + 1;
  }
  return Status::OK();
}

// Prometheus label values escape backslash, double quote and newline.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(control::JsonText(body), "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  SendJson(res, status, json{{"error", message}});
}

// The one route with a parameter, and the methods every route allows.
constexpr const char* kJobPath = R"(/v1/jobs/([^/]*))";
constexpr const char* kAllow = "GET, HEAD, OPTIONS";

bool ValidJobId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  }
  return true;
}

// httplib runs each accepted connection's task on the accepting thread (InlineQueue), and the
// task is process_and_close_socket, overridden here to hand the connection to the gate. The gate
// calls Serve on a worker for each whole request; process_request is httplib's own parsing,
// routing and answer writing.
class GatedServer final : public httplib::Server {
 public:
  void set_gate(HttpGate* gate) { gate_ = gate; }

  bool Serve(const GatedRequest& r, std::chrono::milliseconds timeout) {
    RequestStream strm(r, timeout);
    // A body is never read by a handler (GET reads none; other methods are refused before it):
    // its connection ends with this request, once the body (at most the limit) is drained.
    const bool close_after = r.body_bytes > 0;
    bool closed = false;
    const bool ok = process_request(strm, close_after, closed, nullptr);
    if (close_after) {
      char sink[4096];
      while (strm.read(sink, sizeof sink) > 0) {
      }
    }
    return ok && !closed && !close_after;
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    gate_->Admit(sock);
    return true;
  }
  HttpGate* gate_ = nullptr;
};

class InlineQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

std::string NoSuchEndpoint(const httplib::Request& req) {
  return "no such endpoint: " + req.method + " " + req.path +
         " (there are GET /healthz, /metrics, /v1/jobs, /v1/jobs/{id}, /v1/agents)";
}

bool KnownPath(const std::string& path) {
  static const std::regex job(kJobPath);
  return path == "/healthz" || path == "/metrics" || path == "/v1/jobs" || path == "/v1/agents" ||
         std::regex_match(path, job);
}

bool StartsWithIgnoreCase(const std::string& s, const std::string& prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const HttpOptions& options, const JobManager* jobs, const AgentRegistry* agents,
                 const KvStore* store)
      : options_(options), jobs_(jobs), agents_(agents), store_(store) {}
  ~HttpServerImpl() override { Stop(); }

  Status Listen() {
    const std::string& listen = options_.listen;
    std::string host;
    int port = 0;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(listen, &host, &port), "--http");
    if (IsWildcardHost(host)) host = "0.0.0.0";
    HVD_RETURN_IF_ERROR(HttpGate::Start(
        options_.limits,
        [this](const GatedRequest& r) { return server_.Serve(r, options_.limits.io_timeout); },
        &gate_));
    server_.set_gate(gate_.get());
    server_.new_task_queue = [] { return new InlineQueue; };
    server_.set_payload_max_length(options_.limits.max_body_bytes);
    server_.set_keep_alive_timeout(std::max<time_t>(
        1, std::chrono::duration_cast<std::chrono::seconds>(options_.limits.idle_timeout).count()));
    // httplib's default sets SO_REUSEPORT, which would let a second launcher bind the same port
    // and take half the requests; SO_REUSEADDR alone still allows a quick restart.
    int listen_fd = -1;
    server_.set_socket_options([&listen_fd](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd = sock;
    });
    Routes();
    if (port == 0) {
      port = server_.bind_to_any_port(host);
    } else if (!server_.bind_to_port(host, port)) {
      port = -1;
    }
    if (port <= 0) {
      return Unavailable("cannot listen for HTTP on " + listen +
                         ": the port is in use or the host is not local; pick another --http");
    }
    // httplib listens with a backlog of 5: a burst of connections (a few hundred idle ones)
    // would have the kernel drop SYNs, and a probe's connect wait a second per retry. Listening
    // again on the bound socket raises it; the gate, not the backlog, bounds what is held.
    if (listen_fd >= 0) ::listen(listen_fd, 1024);
    address_ = host + ":" + std::to_string(port);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() does nothing until the loop runs; wait for it so Stop() cannot be lost.
    for (int i = 0; i < 500 && !server_.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return Status::OK();
  }

  std::string address() const override { return address_; }

  void Stop() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
    if (gate_) gate_->Stop();
  }

 private:
  // /v1/* needs a bearer token (unless --rest-public); 401 says how to get in. Wrong tokens are
  // logged with the peer's address, at most a line per peer per interval.
  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (options_.public_api || req.path.compare(0, 4, "/v1/") != 0) return true;
    const std::string auth = req.get_header_value("Authorization");
    const std::string peer = req.remote_addr + ":" + std::to_string(req.remote_port);
    res.set_header("WWW-Authenticate", "Bearer realm=\"hvd-launcherd\"");
    if (!StartsWithIgnoreCase(auth, "Bearer ")) {
      SendError(res, 401,
                req.path +
                    " needs a token: send the header 'Authorization: Bearer TOKEN' with the "
                    "cluster token (the file hvd-launcherd's --token-file names) or the REST "
                    "token (--rest-token-file); hvd-launcherd --rest-public serves /v1/ without "
                    "one (only /healthz and /metrics are open by default)");
      return false;
    }
    std::string_view given(auth);
    given.remove_prefix(7);
    while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
    while (!given.empty() && (given.back() == ' ' || given.back() == '\t')) given.remove_suffix(1);
    for (const std::string& t : options_.tokens) {
      if (!t.empty() && control::TokensEqual(given, t)) return true;
    }
    bad_tokens_.Warn(req.remote_addr, "REST: wrong bearer token from " + peer + " for " +
                                          control::LogEscape(req.method) + " " +
                                          control::LogEscape(req.path));
    SendError(res, 401,
              "the bearer token is neither the cluster token nor the REST token; send the "
              "contents of hvd-launcherd's --token-file or --rest-token-file");
    return false;
  }

  void Routes() {
    // Before routing, so that neither a refused method nor a refused caller has its body read.
    server_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method != "GET" && req.method != "HEAD" && req.method != "OPTIONS") {
        if (!KnownPath(req.path)) {
          SendError(res, 404, NoSuchEndpoint(req));
          return httplib::Server::HandlerResponse::Handled;
        }
        res.set_header("Allow", kAllow);
        SendError(res, 405,
                  req.method + " " + req.path +
                      " is not allowed: the REST endpoint is read-only (" + kAllow +
                      "); change jobs with hvdrun (submit, cancel)");
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.method != "OPTIONS" && !Authorized(req, res)) {
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    server_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server_.Get("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
      std::set<JobState> states;
      if (req.has_param("state")) {
        Status st = ParseStateFilter(req.get_param_value("state"), &states);
        if (!st.ok()) return SendError(res, 400, st.message());
      }
      json jobs = json::array();
      // Held for the loop: a range-for over a member of Snapshot()'s temporary would read a
      // snapshot freed as soon as a newer one is published (it crashed under load).
      const std::shared_ptr<const JobsSnapshot> snap = jobs_->Snapshot();
      for (const auto& s : snap->summaries) {
        if (states.empty() || states.count(s->state)) jobs.push_back(control::JobJson(*s, false));
      }
      SendJson(res, 200, json{{"jobs", jobs}});
    });
    server_.Get(kJobPath, [this](const httplib::Request& req, httplib::Response& res) {
      const std::string id = req.matches[1];
      if (!ValidJobId(id)) {
        return SendError(res, 400,
                         "'" + id +
                             "' is not a job id (letters, digits, '-' and '_'; see "
                             "GET /v1/jobs)");
      }
      std::shared_ptr<const JobStatus> s;
      Status st = jobs_->GetPublished(id, &s);
      if (!st.ok()) return SendError(res, 404, st.message());
      SendJson(res, 200, control::JobJson(*s, true));
    });
    server_.Get("/v1/agents", [this](const httplib::Request&, httplib::Response& res) {
      json agents = json::array();
      for (const AgentInfo& a : AgentsWithSlotsInUse(*agents_, *jobs_)) {
        agents.push_back(control::AgentJson(a));
      }
      SendJson(res, 200, json{{"agents", agents}});
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4");
    });
    // Every route is read-only: other methods get 405 with the Allow header (RFC 9110, in the
    // pre-routing handler above), OPTIONS the header alone.
    for (const char* path : {"/healthz", "/metrics", "/v1/jobs", kJobPath, "/v1/agents"}) {
      server_.Options(path, [](const httplib::Request&, httplib::Response& res) {
        res.set_header("Allow", kAllow);
        res.status = 204;
      });
    }
    // Everything unrouted (and any error without a body) answers JSON, naming what exists.
    server_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int status = res.status == -1 ? 404 : res.status;
      // Only a 404 is about the path; another error (a malformed or oversized request) says so
      // instead of sending the client looking for an endpoint that exists.
      SendError(res, status,
                status == 404   ? NoSuchEndpoint(req)
                : status == 413 ? "the request is too large for the REST endpoint"
                : status == 414 ? "the request's URI is too long for the REST endpoint"
                : status < 500
                    ? "the request could not be read (HTTP " + std::to_string(status) +
                          "); the REST endpoint takes GET, HEAD and OPTIONS requests"
                    : "the REST endpoint failed to answer (HTTP " + std::to_string(status) + ")");
    });
    server_.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          SendError(res, 500, "internal error: " + what);
        });
  }

  std::string Metrics() const {
    std::ostringstream m;
    std::map<std::string, int> agent_states = {
        {"READY", 0}, {"DISCONNECTED", 0}, {"LOST", 0}, {"STOPPED", 0}};
    for (const AgentInfo& a : agents_->List()) ++agent_states[a.state];
    m << "# HELP hvd_agents Agents known to the launcher, by state.\n# TYPE hvd_agents gauge\n";
    for (const auto& [state, n] : agent_states) {
      m << "hvd_agents{state=\"" << state << "\"} " << n << "\n";
    }
    const JobCounts counts = jobs_->Snapshot()->counts;  // never waits for the manager's lock
    m << "# HELP hvd_jobs Jobs in the launcher's table, by state.\n# TYPE hvd_jobs gauge\n";
    for (int s = static_cast<int>(JobState::kPending); s <= static_cast<int>(JobState::kRestarting);
         ++s) {
      auto it = counts.jobs.find(static_cast<JobState>(s));
      m << "hvd_jobs{state=\"" << control::JobStateName(static_cast<JobState>(s)) << "\"} "
        << (it == counts.jobs.end() ? 0 : it->second) << "\n";
    }
    m << "# HELP hvd_ranks_running Worker processes running.\n# TYPE hvd_ranks_running gauge\n"
      << "hvd_ranks_running " << counts.ranks_running << "\n";
    const KvStats kv = store_->stats();
    m << "# HELP hvd_rendezvous_operations_total Rendezvous store operations, by kind.\n"
      << "# TYPE hvd_rendezvous_operations_total counter\n";
    const std::pair<const char*, uint64_t> ops[] = {
        {"set", kv.sets}, {"get", kv.gets}, {"wait", kv.waits}, {"add", kv.adds}, {"cas", kv.cas}};
    for (const auto& [op, n] : ops) {
      m << "hvd_rendezvous_operations_total{op=\"" << op << "\"} " << n << "\n";
    }
    m << "# HELP hvd_rendezvous_keys Keys in the rendezvous store.\n"
      << "# TYPE hvd_rendezvous_keys gauge\nhvd_rendezvous_keys " << kv.keys << "\n";
    m << "# HELP hvd_agent_heartbeat_age_seconds Seconds since each agent's last message.\n"
      << "# TYPE hvd_agent_heartbeat_age_seconds gauge\n";
    for (const auto& [id, age] : agents_->HeartbeatAges(std::chrono::steady_clock::now())) {
      m << "hvd_agent_heartbeat_age_seconds{agent=\"" << Label(id) << "\"} " << age << "\n";
    }
    return m.str();
  }

  const HttpOptions options_;
  const JobManager* const jobs_;
  const AgentRegistry* const agents_;
  const KvStore* const store_;
  control::RateLimitedLog bad_tokens_;
  std::unique_ptr<HttpGate> gate_;  // before server_, which hands it connections
  GatedServer server_;
  std::string address_;
  std::thread thread_;
};

}  // namespace

namespace {

// HTTPS: the REST server on a loopback port behind the TLS terminator (https_front.h).
class HttpsServer final : public HttpServer {
 public:
  HttpsServer(std::unique_ptr<HttpServer> plain, std::unique_ptr<HttpsFront> front)
      : plain_(std::move(plain)), front_(std::move(front)) {}
  ~HttpsServer() override { Stop(); }
  std::string address() const override { return front_->address(); }
  void Stop() override {
    front_->Stop();
    plain_->Stop();
  }

 private:
  std::unique_ptr<HttpServer> plain_;
  std::unique_ptr<HttpsFront> front_;
};

}  // namespace

Status HttpServer::Start(const HttpOptions& options, const JobManager* jobs,
                         const AgentRegistry* agents, const KvStore* store,
                         std::unique_ptr<HttpServer>* out) {
  HttpOptions plain_options = options;
  if (options.tls.enabled()) plain_options.listen = "127.0.0.1:0";
  auto server = std::make_unique<HttpServerImpl>(plain_options, jobs, agents, store);
  HVD_RETURN_IF_ERROR(server->Listen());
  if (!options.tls.enabled()) {
    *out = std::move(server);
    return Status::OK();
  }
  HttpsFrontOptions fo;
  fo.listen = options.listen;
  fo.backend = server->address();
  fo.tls = options.tls;
  fo.max_connections = options.limits.max_connections;
  fo.handshake_timeout = options.limits.head_timeout;
  std::unique_ptr<HttpsFront> front;
  HVD_RETURN_IF_ERROR(HttpsFront::Start(fo, &front));
  *out = std::make_unique<HttpsServer>(std::move(server), std::move(front));
  return Status::OK();
}

}  // namespace hvd::launcherd
