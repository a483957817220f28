// The launcher's REST/metrics endpoint, read-only. /healthz and /metrics are open (probes,
// Prometheus); everything under /v1/ (argv, working directories, stderr tails, hosts) needs
// "Authorization: Bearer <token>" with the cluster token or the REST token, unless the launcher
// runs with --rest-public; without it the answer is 401 saying how to authenticate.
//   GET /healthz             "ok"
//   GET /v1/jobs             {"jobs": [job summary...]}; ?state=RUNNING (any case, or several:
//                            ?state=pending,running) lists only jobs in those states
//   GET /v1/jobs/{id}        the job with its ranks and failure
//   GET /v1/agents           {"agents": [...]}
//   GET /metrics             Prometheus text: hvd_agents{state}, hvd_jobs{state},
//                            hvd_ranks_running, hvd_rendezvous_operations_total{op},
//                            hvd_rendezvous_keys, hvd_agent_heartbeat_age_seconds{agent}
// Jobs and agents are control/status_json.h's shape, the one hvdrun --json prints. Errors are JSON
// {"error": "..."}: 404 for unknown paths and jobs, 400 for malformed ids and unknown states, 405
// (with an Allow header) for any method but GET, HEAD and OPTIONS, answered before any body is
// read. Connections go through HttpGate (http_gate.h): slow, idle and oversized requests cannot
// take the endpoint away from /healthz.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "control/tls.h"
#include "hvd/status.h"
#include "launcherd/agent_registry.h"
#include "launcherd/http_gate.h"
#include "launcherd/job_manager.h"
#include "launcherd/kv_store.h"

namespace hvd::launcherd {

struct HttpOptions {
  std::string listen;  // "host:port", port 0 picks one
  // Any of these as a bearer token opens /v1/* (the cluster token, the REST token).
  std::vector<std::string> tokens;
  bool public_api = false;  // --rest-public: /v1/* without a token
  // Enabled: HTTPS with this certificate (https_front.h); clients need no certificate.
  control::TlsConfig tls;
  HttpLimits limits;
};

class HttpServer {
 public:
  // Listens and serves from background threads. The sources must outlive the server.
  static Status Start(const HttpOptions& options, const JobManager* jobs,
                      const AgentRegistry* agents, const KvStore* store,
                      std::unique_ptr<HttpServer>* out);
  virtual ~HttpServer() = default;
  virtual std::string address() const = 0;  // bound "host:port"
  virtual void Stop() = 0;                  // idempotent
};

}  // namespace hvd::launcherd
