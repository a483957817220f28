// The hvd:// rendezvous protocol's parsing (base/kv_protocol.h), as both the
// launcher's endpoint and the runtime's client run it on bytes from the network:
//   - the input as a request payload: DecodeRequest never crashes, and what it accepts encodes
//     back to a payload that decodes to the same request;
//   - the input as a response payload to each op, and as a server notice;
//   - the input as a byte stream of frames read with ReadFrame from a socket: each frame is at
//     most kMaxFrameBytes and the reader ends at the end of the stream, never past it.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/kv_protocol.h"
#include "fuzz_util.h"

namespace kv = hvd::base::kv;

namespace {

bool SameRequest(const kv::Request& a, const kv::Request& b) {
  return a.op == b.op && a.version == b.version && a.secret == b.secret && a.key == b.key &&
         a.value == b.value && a.keys == b.keys && a.timeout_ms == b.timeout_ms &&
         a.delta == b.delta && a.expect_absent == b.expect_absent && a.expected == b.expected &&
         a.desired == b.desired;
}

bool SameResponse(const kv::Response& a, const kv::Response& b) {
  return a.status.code() == b.status.code() && a.status.message() == b.status.message() &&
         a.value == b.value && a.number == b.number && a.swapped == b.swapped &&
         a.found == b.found && a.current == b.current;
}

void Requests(std::string_view in) {
  kv::Request req;
  if (!kv::DecodeRequest(in, &req).ok()) return;
  const std::string again = kv::EncodeRequest(req);
  kv::Request back;
  const hvd::Status s = kv::DecodeRequest(again, &back);
  HVD_FUZZ_CHECK(s.ok(), "a decoded request does not decode after encoding: " + s.ToString());
  HVD_FUZZ_CHECK(SameRequest(req, back), "a request changed through encode/decode");
  (void)kv::OpName(req.op);
}

void Responses(std::string_view in) {
  for (kv::Op op : {kv::Op::kHello, kv::Op::kSet, kv::Op::kGet, kv::Op::kWait, kv::Op::kAdd,
                    kv::Op::kCas}) {
    kv::Response resp;
    if (!kv::DecodeResponse(op, in, &resp).ok()) continue;
    kv::Response back;
    const hvd::Status s = kv::DecodeResponse(op, kv::EncodeResponse(op, resp), &back);
    HVD_FUZZ_CHECK(s.ok(), "a decoded response does not decode after encoding: " + s.ToString());
    HVD_FUZZ_CHECK(SameResponse(resp, back), "a response changed through encode/decode");
  }
  std::string message;
  kv::DecodeNotice(in, &message);
}

// The stream goes through a real socket, all of it written before reading (the input is far
// under a socketpair's buffer), then closed: ReadFrame must stop at the end, never block.
void Frames(std::string_view in) {
  if (in.size() > 64 * 1024) return;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return;
  size_t done = 0;
  while (done < in.size()) {
    const ssize_t w = write(sv[1], in.data() + done, in.size() - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  close(sv[1]);
  size_t consumed = 0;
  for (;;) {
    std::string payload;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    const hvd::Status s = kv::ReadFrame(sv[0], &payload, deadline, -1, "fuzz peer");
    if (!s.ok()) {
      HVD_FUZZ_CHECK(s.code() != hvd::StatusCode::kDeadlineExceeded,
                     "ReadFrame waited on a closed stream: " + s.ToString());
      break;
    }
    HVD_FUZZ_CHECK(payload.size() <= kv::kMaxFrameBytes, "a frame over the limit was read");
    consumed += 4 + payload.size();
    HVD_FUZZ_CHECK(consumed <= in.size(), "ReadFrame returned more bytes than were sent");
    Requests(payload);
  }
  close(sv[0]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  Requests(in);
  Responses(in);
  Frames(in);
  return 0;
}
