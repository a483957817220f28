// The launcher's hvd:// rendezvous endpoint (launcherd/kv_server.h) as a peer on the network
// reaches it: the input is the byte stream of one TCP connection (frames of
// base/kv_protocol.h; the seeds start with a HELLO carrying kSecret, so the fuzzer
// reaches the authenticated requests too). A fresh store and server per input keep runs
// reproducible. Properties: no crash; the server answers with well-formed frames and closes the
// connection once the client has hung up, within the deadline (no hang); afterwards it holds no
// connection and no buffered bytes (its budgets are not leaked).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "base/kv_protocol.h"
#include "launcherd/kv_server.h"
#include "launcherd/kv_store.h"
#include "loopback.h"

namespace kv = hvd::base::kv;
using namespace std::chrono_literals;

namespace {

constexpr const char* kSecret = "fuzz-secret";

// Frames the server sent: each header's length within the protocol's limit and whole.
void CheckFrames(const std::string& out) {
  size_t at = 0;
  while (at + 4 <= out.size()) {
    const uint32_t n = kv::FrameLength(reinterpret_cast<const unsigned char*>(out.data() + at));
    HVD_FUZZ_CHECK(n <= kv::kMaxFrameBytes, "the server sent a frame of " + std::to_string(n));
    at += 4 + n;
  }
  HVD_FUZZ_CHECK(at == out.size(), "the server's last frame is cut short");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvd::launcherd::KvStore store;
  hvd::launcherd::KvServerOptions options;
  // Short enough that an input which stops mid-frame ends quickly, long enough for a loaded CI.
  options.hello_timeout = 1s;
  options.io_timeout = 1s;
  options.idle_timeout = 2s;
  std::unique_ptr<hvd::launcherd::KvServer> server;
  const hvd::Status s = hvd::launcherd::KvServer::Start(
      "127.0.0.1:0", &store,
      [](const std::string& secret, std::string* prefix) {
        if (secret != kSecret) return false;
        *prefix = "job/fuzz/";
        return true;
      },
      options, &server);
  HVD_FUZZ_CHECK(s.ok(), s.ToString());

  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const hvd::fuzz::Exchange ex = hvd::fuzz::SendAndDrain(server->address(), in, 10s);
  HVD_FUZZ_CHECK(ex.connected, "could not connect to the rendezvous endpoint");
  HVD_FUZZ_CHECK(ex.closed, "the endpoint kept a connection open 10 s after its client hung up");
  CheckFrames(ex.received);
  // The server closes its side before it forgets the connection: give it a moment.
  hvd::launcherd::KvServerStats st;
  for (int i = 0; i < 500; ++i) {
    st = server->stats();
    if (st.connections == 0 && st.buffered_bytes == 0) break;
    std::this_thread::sleep_for(2ms);
  }
  HVD_FUZZ_CHECK(st.connections == 0, "a closed connection is still counted");
  HVD_FUZZ_CHECK(st.buffered_bytes == 0,
                 std::to_string(st.buffered_bytes) + " bytes still charged after the connection");
  HVD_FUZZ_CHECK(st.waiting == 0, "a wait outlived its connection");
  server->Stop();
  return 0;
}
