// The launcher's REST endpoint (launcherd/http_server.h) as a client on the network reaches it:
// the input is the byte stream of one TCP connection to a real Launcher's HTTP port, through its
// connection gate, cpp-httplib's request parsing, the routing and the handlers. The launcher is
// started once, with one queued job (so listings and /v1/jobs carry a record) and the token
// the seeds and the dictionary use as a bearer token. Properties: no crash; every connection is
// answered or closed within the deadline; what comes back is HTTP.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "control/grpc_util.h"
#include "hvd/v1/launcher.grpc.pb.h"
#include "launcherd/launcher.h"
#include "loopback.h"

using namespace std::chrono_literals;

namespace {

constexpr const char* kToken = "fuzz-token-0123456789abcdef";

hvd::launcherd::Launcher* StartOnce() {
  static std::unique_ptr<hvd::launcherd::Launcher> launcher = [] {
    hvd::launcherd::LauncherOptions o;
    o.listen = "127.0.0.1:0";
    o.http_listen = "127.0.0.1:0";
    o.token = kToken;
    std::unique_ptr<hvd::launcherd::Launcher> l;
    const hvd::Status s = hvd::launcherd::Launcher::Start(o, &l);
    HVD_FUZZ_CHECK(s.ok(), s.ToString());
    // No agent: the job stays queued, with its spec for the JSON.
    auto stub = hvd::v1::Launcher::NewStub(hvd::control::NewChannel(l->grpc_address()));
    hvd::v1::SubmitJobRequest req;
    req.mutable_spec()->add_argv("/bin/true");
    req.mutable_spec()->set_np(2);
    req.mutable_spec()->set_name("fuzz \"job\"\n<b>");
    (*req.mutable_spec()->mutable_env())["FUZZ"] = "1";
    req.mutable_spec()->set_detached(true);
    hvd::v1::SubmitJobResponse resp;
    auto ctx = hvd::control::NewClientContext(kToken, 10s);
    const grpc::Status g = stub->SubmitJob(ctx.get(), req, &resp);
    HVD_FUZZ_CHECK(g.ok(), "SubmitJob: " + g.error_message());
    return l;
  }();
  return launcher.get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvd::launcherd::Launcher* l = StartOnce();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // The gate gives a request head 5 s and a worker 5 s to read a body and answer.
  const hvd::fuzz::Exchange ex = hvd::fuzz::SendAndDrain(l->http_address(), in, 15s);
  HVD_FUZZ_CHECK(ex.connected, "could not connect to the REST endpoint");
  HVD_FUZZ_CHECK(ex.closed, "the REST endpoint kept a connection open 15 s after its client hung "
                            "up; received: " + ex.received.substr(0, 200));
  if (!ex.received.empty()) {
    HVD_FUZZ_CHECK(ex.received.rfind("HTTP/1.", 0) == 0,
                   "the answer is not HTTP: " + ex.received.substr(0, 200));
  }
  return 0;
}
