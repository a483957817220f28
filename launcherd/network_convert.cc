#include "launcherd/network_convert.h"

namespace hvd::launcherd {

static_assert(static_cast<int>(ProbeStep::kListen) == v1::NetworkProbe::LISTEN);
static_assert(static_cast<int>(ProbeStep::kDial) == v1::NetworkProbe::DIAL);
static_assert(static_cast<int>(ProbeStep::kDone) == v1::NetworkProbe::DONE);

void ToProto(const ProbeCommand& c, v1::NetworkProbe* p) {
  p->set_probe_id(c.probe_id);
  p->set_step(static_cast<v1::NetworkProbe::Step>(c.step));
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
  r.step = static_cast<ProbeStep>(p.step());
  r.port = p.port();
  r.error = p.error();
  for (const v1::ProbeDialResult& d : p.dials()) {
    r.dials.push_back({d.candidate(), d.ok(), d.error(), d.micros()});
  }
  return r;
}

void ToProto(const control::NetworkReport& r, v1::NetworkReport* p) {
  p->set_decided(r.decided);
  p->set_ok(r.ok);
  p->set_summary(r.summary);
  p->set_chosen(r.chosen);
  for (const control::NetworkReport::HostChoice& h : r.hosts) {
    v1::NetworkReport::Host* q = p->add_hosts();
    q->set_host(h.host);
    q->set_agent_id(h.agent_id);
    q->set_iface(h.iface);
    q->set_address(h.address);
  }
  for (const control::NetworkReport::Dial& d : r.dials) {
    v1::NetworkReport::Dial* q = p->add_dials();
    q->set_candidate(d.candidate);
    q->set_from_host(d.from);
    q->set_to_host(d.to);
    q->set_address(d.address);
    q->set_ok(d.ok);
    q->set_error(d.error);
    q->set_micros(d.micros);
  }
  p->set_probe_ms(r.probe_ms);
}

control::NetworkReport FromProto(const v1::NetworkReport& p) {
  control::NetworkReport r;
  r.decided = p.decided();
  r.ok = p.ok();
  r.summary = p.summary();
  r.chosen = p.chosen();
  for (const v1::NetworkReport::Host& h : p.hosts()) {
    r.hosts.push_back({h.host(), h.agent_id(), h.iface(), h.address()});
  }
  for (const v1::NetworkReport::Dial& d : p.dials()) {
    r.dials.push_back(
        {d.candidate(), d.from_host(), d.to_host(), d.address(), d.ok(), d.error(), d.micros()});
  }
  r.probe_ms = p.probe_ms();
  return r;
}

}  // namespace hvd::launcherd
