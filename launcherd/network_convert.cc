#include "launcherd/network_convert.h"

namespace hvd::launcherd {

ProbeStep ProbeStepFromProto(v1::NetworkProbe::Step p) {
  switch (p) {
    case v1::NetworkProbe::LISTEN:
      return ProbeStep::kListen;
    case v1::NetworkProbe::DIAL:
      return ProbeStep::kDial;
    case v1::NetworkProbe::DONE:
      return ProbeStep::kDone;
    default:  // STEP_UNSPECIFIED, or a number this build does not know
      return ProbeStep::kUnspecified;
  }
}

v1::NetworkProbe::Step ProbeStepToProto(ProbeStep s) {
  switch (s) {
    case ProbeStep::kUnspecified:
      return v1::NetworkProbe::STEP_UNSPECIFIED;
    case ProbeStep::kListen:
      return v1::NetworkProbe::LISTEN;
    case ProbeStep::kDial:
      return v1::NetworkProbe::DIAL;
    case ProbeStep::kDone:
      return v1::NetworkProbe::DONE;
  }
  return v1::NetworkProbe::STEP_UNSPECIFIED;  // a value outside the enum
}

void ToProto(const ProbeCommand& c, v1::NetworkProbe* p) {
  p->set_probe_id(c.probe_id);
  p->set_step(ProbeStepToProto(c.step));
  p->set_timeout_ms(c.timeout_ms);
  for (const ProbeCommand::Target& t : c.targets) {
    v1::ProbeTarget* q = p->add_targets();
    q->set_candidate(t.candidate);
    q->set_address(t.address);
    q->set_port(t.port);
    q->set_expect_agent(t.expect_agent);
  }
}

ProbeReport FromProto(const v1::NetworkProbeReport& p) {
  ProbeReport r;
  r.probe_id = p.probe_id();
  r.step = ProbeStepFromProto(p.step());
  r.port = p.port();
  r.error = p.error();
  for (const v1::ProbeDialResult& d : p.dials()) {
    r.dials.push_back({d.candidate(), d.ok(), d.error(), d.micros()});
  }
  return r;
}

}  // namespace hvd::launcherd
