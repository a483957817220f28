#include "launcherd/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "control/status_json.h"
#include "launcherd/listen_address.h"
#include "launcherd/proto_convert.h"

namespace hvd::launcherd {
namespace {

using nlohmann::json;

// Jobs and agents go through hvd.v1 and control/status_json.h: hvdrun's --json prints the very
// same shape from the same converter.
json JobJson(const JobStatus& s, bool full) {
  v1::JobStatus p;
  ToProto(s, &p);
  return control::JobJson(p, full);
}

json AgentJson(const AgentInfo& a) {
  v1::AgentInfo p;
  ToProto(a, &p);
  return control::AgentJson(p);
}

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

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(const JobManager* jobs, const AgentRegistry* agents, const KvStore* store)
      : jobs_(jobs), agents_(agents), store_(store) {}
  ~HttpServerImpl() override { Stop(); }

  Status Listen(const std::string& listen) {
    std::string host;
    int port = 0;
    HVD_RETURN_IF_ERROR_CTX(ParseListenAddress(listen, &host, &port), "--http");
    if (IsWildcardHost(host)) host = "0.0.0.0";
    // httplib's default sets SO_REUSEPORT, which would let a second launcher bind the same port
    // and take half the requests; SO_REUSEADDR alone still allows a quick restart.
    server_.set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
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
  }

 private:
  void Routes() {
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
      for (const JobStatus& s : jobs_->List()) {
        if (states.empty() || states.count(s.state)) jobs.push_back(JobJson(s, false));
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
      JobStatus s;
      Status st = jobs_->Get(id, &s);
      if (!st.ok()) return SendError(res, 404, st.message());
      SendJson(res, 200, JobJson(s, true));
    });
    server_.Get("/v1/agents", [this](const httplib::Request&, httplib::Response& res) {
      json agents = json::array();
      for (const AgentInfo& a : AgentsWithSlotsInUse(*agents_, *jobs_)) {
        agents.push_back(AgentJson(a));
      }
      SendJson(res, 200, json{{"agents", agents}});
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(Metrics(), "text/plain; version=0.0.4");
    });
    // Every route is read-only: other methods get 405 with the Allow header (RFC 9110), OPTIONS
    // the header alone, so a client that POSTs learns the resource exists but is not writable.
    for (const char* path : {"/healthz", "/metrics", "/v1/jobs", kJobPath, "/v1/agents"}) {
      auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", kAllow);
        SendError(res, 405,
                  req.method + " " + req.path +
                      " is not allowed: the REST endpoint is read-only (" + kAllow +
                      "); change jobs with hvdrun (submit, cancel)");
      };
      server_.Post(path, not_allowed);
      server_.Put(path, not_allowed);
      server_.Patch(path, not_allowed);
      server_.Delete(path, not_allowed);
      server_.Options(path, [](const httplib::Request&, httplib::Response& res) {
        res.set_header("Allow", kAllow);
        res.status = 204;
      });
    }
    // Everything unrouted (and any error without a body) answers JSON, naming what exists.
    server_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      SendError(res, res.status == -1 ? 404 : res.status,
                "no such endpoint: " + req.method + " " + req.path +
                    " (there are GET /healthz, /metrics, /v1/jobs, /v1/jobs/{id}, /v1/agents)");
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
    std::map<std::string, int> agent_states = {{"READY", 0}, {"DISCONNECTED", 0}, {"LOST", 0}};
    for (const AgentInfo& a : agents_->List()) ++agent_states[a.state];
    m << "# HELP hvd_agents Agents known to the launcher, by state.\n# TYPE hvd_agents gauge\n";
    for (const auto& [state, n] : agent_states) {
      m << "hvd_agents{state=\"" << state << "\"} " << n << "\n";
    }
    const JobCounts counts = jobs_->Counts();
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

  const JobManager* const jobs_;
  const AgentRegistry* const agents_;
  const KvStore* const store_;
  httplib::Server server_;
  std::string address_;
  std::thread thread_;
};

}  // namespace

Status HttpServer::Start(const std::string& listen, const JobManager* jobs,
                         const AgentRegistry* agents, const KvStore* store,
                         std::unique_ptr<HttpServer>* out) {
  auto server = std::make_unique<HttpServerImpl>(jobs, agents, store);
  HVD_RETURN_IF_ERROR(server->Listen(listen));
  *out = std::move(server);
  return Status::OK();
}

}  // namespace hvd::launcherd
