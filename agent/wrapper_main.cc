// hvd-worker-wrapper: the worker wrapper (worker_wrapper.h) as a binary of its own. hvd-agent and
// hvdrun can run the wrapper themselves (/proc/self/exe), but they load gRPC, protobuf and Abseil
// first, ~8 ms per rank; this binary links only the wrapper, so a job's ranks start sooner. They
// use it when it sits beside them (agent.h: AgentOptions::wrapper_path).
#include <cstdio>

#include "agent/worker_wrapper.h"

int main(int argc, char** argv) {
  hvd::agent::RunWorkerWrapperIfAsked(argc, argv);  // exits when asked to wrap a worker
  std::fprintf(stderr,
               "hvd-worker-wrapper: started by hvd-agent and hvdrun to run a job's worker; there "
               "is nothing to run by hand\n");
  return 2;
}
