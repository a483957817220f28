#include "launcherd/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "launcherd/listen_address.h"
#include "launcherd/network_json.h"

namespace hvd::launcherd {
namespace {

using nlohmann::json;

json RankJson(const RankStatus& r) {
  const control::RankSlot& p = r.placement;
  return {{"rank", p.rank},
          {"local_rank", p.local_rank},
          {"local_size", p.local_size},
          {"cross_rank", p.cross_rank},
          {"cross_size", p.cross_size},
          {"agent_id", p.agent_id},
          {"host", p.host},
          {"slot", p.slot},
          {"state", control::RankStateName(r.state)},
          {"pid", r.pid},
          {"exit_code", r.exit_code},
          {"signal", r.signal},
          {"start_time_ms", r.start_time_ms},
          {"end_time_ms", r.end_time_ms},
          {"rendezvous_time_ms", r.rendezvous_time_ms},
          {"error", r.error}};
}

json FailureJson(const JobFailure& f) {
  return {{"rank", f.rank},     {"host", f.host},       {"exit_code", f.exit_code},
          {"signal", f.signal}, {"message", f.message}, {"stderr_tail", f.stderr_tail}};
}

json JobJson(const JobStatus& s, bool full) {
  json j = {{"id", s.id},
            {"name", s.spec.name},
            {"state", control::JobStateName(s.state)},
            {"reason", s.reason},
            {"np", s.spec.np},
            {"argv", s.spec.argv},
            {"submit_time_ms", s.submit_time_ms},
            {"start_time_ms", s.start_time_ms},
            {"end_time_ms", s.end_time_ms},
            {"exit_code", s.exit_code},
            {"attempt", s.attempt},
            {"stall", s.stall},
            {"stall_since_ms", s.stall_since_ms}};
  if (!full) return j;
  j["network"] = NetworkReportJson(s.network);
  json hosts = json::array();
  for (const control::HostRequest& h : s.spec.hosts) {
    hosts.push_back({{"host", h.host}, {"slots", h.slots}});
  }
  j["hosts"] = hosts;
  j["working_dir"] = s.spec.working_dir;
  json ranks = json::array();
  for (const RankStatus& r : s.ranks) ranks.push_back(RankJson(r));
  j["ranks"] = ranks;
  j["failure"] = s.has_failure ? FailureJson(s.failure) : json(nullptr);
  json previous = json::array();
  for (const JobFailure& f : s.previous_failures) previous.push_back(FailureJson(f));
  j["previous_failures"] = previous;
  j["max_restarts"] = s.spec.max_restarts;
  return j;
}

json AgentJson(const AgentInfo& a) {
  return {{"id", a.id},
          {"host", a.host},
          {"advertise_addr", a.advertise_addr},
          {"advertise_iface", a.advertise_iface},
          {"interfaces", InterfacesJson(a.interfaces)},
          {"slots", a.slots},
          {"slots_in_use", a.slots_in_use},
          {"gpus", a.gpus},
          {"pid", a.pid},
          {"version", a.version},
          {"state", a.state},
          {"last_heartbeat_ms", a.last_heartbeat_ms}};
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
  // Replace invalid UTF-8 (process output can be anything) rather than throw.
  res.set_content(body.dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                  "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& message) {
  SendJson(res, status, json{{"error", message}});
}

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
    server_.Get("/v1/jobs", [this](const httplib::Request&, httplib::Response& res) {
      json jobs = json::array();
      for (const JobStatus& s : jobs_->List()) jobs.push_back(JobJson(s, false));
      SendJson(res, 200, json{{"jobs", jobs}});
    });
    server_.Get(R"(/v1/jobs/([^/]*))", [this](const httplib::Request& req, httplib::Response& res) {
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
