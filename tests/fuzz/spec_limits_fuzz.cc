// What a gRPC client sends the launcher, checked at the edge (control/spec_limits.h): the input
// is parsed as a serialized hvd.v1.JobSpec and as an hvd.v1.AgentInfo, as the launcher's
// services receive them, then validated. Properties: no crash; a job spec that passes is within
// every limit, and placing it on agents that match its host list succeeds, and quickly (finding 4
// of issue 20: a registration with 2^31 slots once made placement build an O(slots) vector).
#include <cstdint>
#include <string>
#include <vector>

#include "control/host_spec.h"
#include "control/job_model_proto.h"
#include "control/placement.h"
#include "control/spec_limits.h"
#include "fuzz_util.h"
#include "hvd/v1/agent.pb.h"
#include "hvd/v1/common.pb.h"
#include "google/protobuf/stubs/logging.h"

namespace c = hvd::control;
namespace v1 = hvd::v1;

namespace {

void JobSpecs(const uint8_t* data, size_t size) {
  v1::JobSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return;
  if (!c::ValidateJobSpec(spec).ok()) return;
  HVD_FUZZ_CHECK(spec.np() >= 1 && spec.np() <= c::kMaxRanks, "np out of range passed");
  HVD_FUZZ_CHECK(spec.argv_size() >= 1 && !spec.argv(0).empty(), "a spec without argv passed");
  HVD_FUZZ_CHECK(spec.hosts_size() <= c::kMaxHostEntries, "too many hosts passed");
  // One agent per named host with exactly its slots: the request must fit. np is bounded by
  // kMaxRanks, so the ranks placed are too; the slots per host are not what placement may loop on.
  if (spec.hosts().empty()) return;
  std::vector<c::AgentSlots> agents;
  c::PlacementRequest request;
  request.np = spec.np();
  for (const v1::HostSlots& h : spec.hosts()) {
    c::AgentSlots a;
    a.id = "agent-" + h.host();
    a.host = h.host();
    a.slots = h.slots();
    a.order = static_cast<int64_t>(agents.size());
    agents.push_back(a);
    request.hosts.push_back({h.host(), h.slots()});
  }
  const c::PlacementResult r = c::Place(agents, request);
  HVD_FUZZ_CHECK(r.outcome == c::PlacementOutcome::kPlaced, "a valid spec did not place on its "
                                                            "own hosts: " + r.reason);
  HVD_FUZZ_CHECK(r.ranks.size() == static_cast<size_t>(spec.np()), "placed a wrong rank count");
}

void AgentInfos(const uint8_t* data, size_t size) {
  v1::AgentInfo info;
  if (!info.ParseFromArray(data, static_cast<int>(size))) return;
  if (!c::ValidateAgentInfo(info).ok()) return;
  HVD_FUZZ_CHECK(c::CheckHostName(info.host()).ok(), "an agent with a bad host name passed");
  HVD_FUZZ_CHECK(info.slots() >= 1 && info.slots() <= c::kMaxSlotsPerHost,
                 "an agent with slots out of range passed");
  // An agent with up to kMaxSlotsPerHost slots must place a small job quickly.
  c::AgentSlots a;
  a.id = "agent-0";
  a.host = info.host();
  a.advertise_addr = info.advertise_addr();
  a.slots = info.slots();
  c::PlacementRequest request;
  request.np = 1;
  const c::PlacementResult r = c::Place({a}, request);
  HVD_FUZZ_CHECK(r.outcome == c::PlacementOutcome::kPlaced, "np=1 did not place: " + r.reason);
}

}  // namespace

// Protobuf logs every string field that is not UTF-8 it parses: thousands of lines a second here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  JobSpecs(data, size);
  AgentInfos(data, size);
  return 0;
}
