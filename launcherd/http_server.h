// The launcher's REST/metrics endpoint (read-only, unauthenticated: bind it to a trusted network):
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
// (with an Allow header) for any method but GET, HEAD and OPTIONS.
#pragma once

#include <memory>
#include <string>

#include "hvd/status.h"
#include "launcherd/agent_registry.h"
#include "launcherd/job_manager.h"
#include "launcherd/kv_store.h"

namespace hvd::launcherd {

class HttpServer {
 public:
  // Listens on `listen` ("host:port", port 0 picks one) and serves from a background thread.
  // The sources must outlive the server.
  static Status Start(const std::string& listen, const JobManager* jobs,
                      const AgentRegistry* agents, const KvStore* store,
                      std::unique_ptr<HttpServer>* out);
  virtual ~HttpServer() = default;
  virtual std::string address() const = 0;  // bound "host:port"
  virtual void Stop() = 0;                  // idempotent
};

}  // namespace hvd::launcherd
