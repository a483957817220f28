// The streaming engine: see pipeline.h for the vocabulary.
//
// Loop (one thread, no blocking I/O):
//   1. receive up to kMaxIoBytes of the current receive step (into place, or into the scratch
//      ring), then reduce every whole element that has arrived;
//   2. send up to kMaxIoBytes of the current send step, never past its gate's processed prefix;
//   3. if neither moved a byte, WaitReady on the directions that could move, until
//      last_progress + idle_timeout.
// A step with 0 bytes completes at once, so segments of 0 elements need no special case.
//
// The scratch ring holds at most one partial element plus one chunk, because every chunk is
// reduced right after it is received; its size is a multiple of every element size, so an element
// never straddles the wrap.
#include "collectives/pipeline.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "collectives/reduce.h"
#include "collectives/stream_copy.h"

namespace hvd::runtime::collectives::internal {
namespace {

using transport::Clock;
using transport::Link;
using transport::WaitItem;

constexpr size_t kScratchBytes = 2 * kMaxIoBytes;

std::string Progress(const char* verb, size_t done, size_t total) {
  return std::string(verb) + " " + std::to_string(done) + " of " + std::to_string(total) + " bytes";
}

}  // namespace

char* ThreadScratch(Scratch which, size_t bytes) {
  thread_local std::unique_ptr<char[]> bufs[4];
  thread_local size_t capacity[4] = {0, 0, 0, 0};
  const int i = static_cast<int>(which);
  if (capacity[i] < bytes) {
    bufs[i].reset(new char[bytes]);
    capacity[i] = bytes;
  }
  return bufs[i].get();
}

std::vector<size_t> SplitEvenly(size_t count, int parts) {
  std::vector<size_t> off;
  SplitEvenly(count, parts, &off);
  return off;
}

void SplitEvenly(size_t count, int parts, std::vector<size_t>* off) {
  off->assign(static_cast<size_t>(parts) + 1, 0);
  const size_t base = count / static_cast<size_t>(parts);
  const size_t extra = count % static_cast<size_t>(parts);
  for (size_t i = 0; i < static_cast<size_t>(parts); ++i) {
    (*off)[i + 1] = (*off)[i] + base + (i < extra ? 1 : 0);
  }
}

std::string PeerName(const Comm& comm, int peer, const Status* error) {
  if (peer == comm.rank()) return "rank " + std::to_string(comm.JobRank(peer)) + " (self)";
  // The link's description names the peer's rank in the whole job, also on a group view.
  const std::string& description = comm.transport->link(peer)->description();
  if (error != nullptr && error->message().find(description) != std::string::npos) {
    return description.substr(0, description.find(" ("));
  }
  return description;
}

Status RunPipeline(const Comm& comm, const Pipeline& plan) {
  transport::Transport* t = comm.transport;
  const size_t ns = plan.sends.size();
  const size_t nr = plan.recvs.size();
  Link* out = ns > 0 ? t->link(plan.send_peer) : nullptr;
  Link* in = nr > 0 ? t->link(plan.recv_peer) : nullptr;
  const size_t es = DataTypeSize(plan.dtype);

  size_t max_reduce = 0;
  for (const RecvStep& r : plan.recvs) {
    if (r.reduce) max_reduce = std::max(max_reduce, r.bytes);
  }
  // kScratchBytes is a multiple of 8, and max_reduce a multiple of es: both keep elements whole.
  const size_t scratch_bytes = std::min(kScratchBytes, max_reduce);
  char* scratch = scratch_bytes > 0 ? ThreadScratch(Scratch::kPipeline, scratch_bytes) : nullptr;

  size_t ri = 0, received = 0, processed = 0;  // current receive step and its progress
  size_t si = 0, sent = 0;                     // current send step and its progress
  bool zero_copy_in = false;                   // the receive link has offered zero-copy bytes

  auto step_name = [&](bool recv) {
    const size_t k = recv ? ri : si;
    const size_t n = recv ? nr : ns;
    return std::string(plan.algorithm) + " step " + std::to_string(k + 1) + "/" + std::to_string(n);
  };
  // Transport errors usually name the link already; then the short "rank N" avoids repeating it.
  auto peer = [&](const Link* link, const Status& s) {
    return PeerName(comm, link == in ? plan.recv_peer : plan.send_peer, &s);
  };
  auto recv_context = [&](const Status& s) {
    return step_name(true) + ": recv from " + peer(in, s);
  };
  auto send_context = [&](const Status& s) {
    return step_name(false) + ": send to " + peer(out, s);
  };

  // How many bytes of the current send step may be sent now.
  auto send_limit = [&]() -> size_t {
    const SendStep& s = plan.sends[si];
    if (s.gate < 0 || static_cast<size_t>(s.gate) < ri) return s.bytes;
    if (static_cast<size_t>(s.gate) > ri) return 0;
    return std::min(s.bytes, processed);
  };

  Clock::time_point last_progress = Clock::now();
  for (;;) {
    while (ri < nr && processed == plan.recvs[ri].bytes) {
      ++ri;
      received = processed = 0;
    }
    while (si < ns && sent == plan.sends[si].bytes) {
      ++si;
      sent = 0;
    }
    if (ri == nr && si == ns) return Status::OK();

    bool progress = false;
    if (ri < nr) {
      const RecvStep& step = plan.recvs[ri];
      size_t moved = 0;
      if (!step.reduce) {
        const size_t want = std::min(kMaxIoBytes, step.bytes - received);
        const void* src = nullptr;
        const size_t here = step.stream ? in->PeekRecv(want, &src) : 0;
        if (here > 0) {
          StreamCopy(step.dst + received, src, here);
          in->ConsumeRecv(here);
          moved = here;
        } else {
          Status s = in->TryRecv(step.dst + received, want, &moved);
          if (!s.ok()) return s.WithContext(recv_context(s));
        }
        received += moved;
        processed = received;
      } else {
        // Zero-copy (shared memory): reduce straight out of the link's buffer; when the send step
        // now due forwards exactly these bytes, write the result straight into the outgoing
        // buffer as well, so the ring never reads its own reduction back.
        size_t contiguous = 0;
        if (received == processed) {
          const void* src = nullptr;
          contiguous = in->PeekRecv(std::min(kMaxIoBytes, step.bytes - processed), &src);
          size_t n = contiguous / es * es;
          if (n > 0) {
            void* fwd = nullptr;
            size_t fwd_n = 0;
            if (si < ns && plan.sends[si].gate == static_cast<int>(ri) &&
                plan.sends[si].data == step.dst && sent == processed) {
              fwd_n = out->PeekSend(n, &fwd) / es * es;
            }
            if (fwd_n > 0) n = fwd_n;
            // Out of place (step.local), the first operand is the input, read where it is.
            const char* first =
                step.local != nullptr ? step.local + processed : step.dst + processed;
            const bool forward_now = fwd_n > 0 && step.scale == 1.0;
            // Forwarded from the outgoing copy, the destination's bytes are not read again here.
            const bool streamed = fwd_n > 0 && step.stream;
            if (streamed) {
              ReduceToStreamed(step.dst + processed, first, src, fwd, n / es, plan.dtype, plan.op,
                               step.scale);
            } else {
              ReduceTo(step.dst + processed, first, src, forward_now ? fwd : nullptr, n / es,
                       plan.dtype, plan.op);
            }
            if (step.scale != 1.0 && !streamed) {
              Scale(step.dst + processed, n / es, plan.dtype, step.scale);
              // Scaled in the (aligned) destination, then copied: `fwd` may have any alignment,
              // and Scale needs its elements aligned.
              if (fwd_n > 0) std::memcpy(fwd, step.dst + processed, n);
            }
            if (fwd_n > 0) {
              out->CommitSend(n);
              sent += n;
            }
            in->ConsumeRecv(n);
            received = processed = processed + n;
            moved = n;
          }
        }
        const size_t pos = received % scratch_bytes;
        size_t want = std::min({kMaxIoBytes, step.bytes - received, scratch_bytes - pos,
                                scratch_bytes - (received - processed)});
        // An element split by the end of a zero-copy link's buffer: take just that element
        // through scratch, then go back to reducing in place.
        if (contiguous > 0 || zero_copy_in) want = std::min(want, es - (received - processed) % es);
        zero_copy_in |= contiguous > 0;
        if (moved == 0 && want > 0) {
          Status s = in->TryRecv(scratch + pos, want, &moved);
          if (!s.ok()) return s.WithContext(recv_context(s));
          received += moved;
        }
        // Reduce every whole element that has arrived (in at most two pieces around the wrap).
        while (received - processed >= es) {
          const size_t ppos = processed % scratch_bytes;
          const size_t n = std::min((received - processed) / es * es, scratch_bytes - ppos);
          const char* first = step.local != nullptr ? step.local + processed : step.dst + processed;
          ReduceTo(step.dst + processed, first, scratch + ppos, nullptr, n / es, plan.dtype,
                   plan.op);
          if (step.scale != 1.0) Scale(step.dst + processed, n / es, plan.dtype, step.scale);
          processed += n;
        }
      }
      progress |= moved > 0;
    }
    if (si < ns) {
      const size_t limit = send_limit();
      if (limit > sent) {
        size_t moved = 0;
        const size_t want = std::min(kMaxIoBytes, limit - sent);
        Status s = out->TrySend(plan.sends[si].data + sent, want, &moved);
        if (!s.ok()) return s.WithContext(send_context(s));
        sent += moved;
        progress |= moved > 0;
      }
    }
    if (progress) {
      last_progress = Clock::now();
      continue;
    }

    // Nothing moved: sleep until a direction that could move is ready.
    const bool wait_recv = ri < nr;
    const bool wait_send = si < ns && send_limit() > sent;
    std::vector<WaitItem> items;
    items.reserve(2);
    if (wait_recv && wait_send && in == out) {
      items.push_back({in, true, true});
    } else {
      if (wait_recv) items.push_back({in, false, true});
      if (wait_send) items.push_back({out, true, false});
    }
    if (items.empty()) {
      return Internal(step_name(false) + ": send step gated on a receive step that never comes");
    }
    Status s = t->WaitReady(items, last_progress + comm.idle_timeout);
    if (!s.ok()) {
      std::string what = step_name(wait_recv) + ": ";
      if (s.code() == StatusCode::kDeadlineExceeded) {
        what += "no progress for " + std::to_string(comm.idle_timeout.count()) + " ms, ";
      }
      if (wait_recv) {
        what += "waiting to recv from " + peer(in, s) + " (" +
                Progress("received", received, plan.recvs[ri].bytes) + ")";
      }
      if (wait_send) {
        what += std::string(wait_recv ? " and " : "") + "waiting to send to " + peer(out, s) +
                " (" + Progress("sent", sent, plan.sends[si].bytes) + ")";
      }
      return s.WithContext(what);
    }
  }
}

}  // namespace hvd::runtime::collectives::internal
