// Single-copy allreduce, for large buffers among ranks of one host: ranks read each other's
// buffers through the kernel (process_vm_readv, "cross memory attach", as Open MPI's vader does
// for large messages) instead of streaming them through the shared-memory rings. A ring byte is
// copied twice (into the ring, out of it) and handed from one core's cache to the other's while
// still dirty, which some machines make several times slower than a read of memory the owner
// wrote long ago (docs/performance-api.md, "The slow mode at large sizes"); here each byte is
// copied once, by the kernel, from wherever it lies.
//
// Vocabulary (N ranks, this rank r, parts as AllreduceParts's: `off` has N + 1 entries):
//   source of q - what rank q reduces from: its input (out of place) or its buffer (in place).
//   owner       - rank (i - 1) mod N owns part i: it computes the part's result, where the ring's
//                 reduce-scatter leaves it.
//   piece       - parts are read and reduced in pieces of 4 ring chunks (1 MiB by default, 4 MiB
//                 at most) in per-thread scratch, so that a piece is reduced while it is in cache.
//   phases      - 1 hello: every rank sends every other the addresses of its source and its buffer,
//                 the operation's size and type (a rank running another algorithm is caught
//                 here), and whether the kernel can read them (else every rank takes the ring);
//                 2 reduce: the owner of part i reads the part from rank i's source, then from
//                 i + 1, ..., reducing each read piece in ring order (x_k op= acc) and the last
//                 with its own source into its buffer, scaled there;
//                 3 every rank tells every other that its part is final;
//                 4 gather: every rank reads every other part from its owner's buffer into its own;
//                 5 every rank tells every other that it has finished reading, so that none
//                 returns (and lets its caller reuse the buffer) while a peer still reads it.
// Reduction order: the ring's, element for element (collectives.h): part i is
//   x_{i-1} op (... op (x_{i+1} op x_i)), so the result is the ring's bit for bit.
// Why nothing is read while it is written: in phase 2 rank q writes only part q + 1 of its buffer,
// and peers read q's source only at the parts they own, never q + 1. In phase 4 rank q writes
// every part but q + 1, and peers read only part q + 1 of q's buffer; phase 3 ended every read
// of sources first. Out of place, sources are never written.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/errno_text.h"
#include "base/logging.h"
#include "collectives/collectives.h"
#include "collectives/pipeline.h"
#include "collectives/reduce.h"
#include "collectives/single_copy_choice.h"
#include "collectives/stream_copy.h"

namespace hvd::runtime::collectives {
namespace {

constexpr uint64_t kHelloMagic = 0x32437053'64766800;  // "\0hvdSpC2"

struct Hello {
  uint64_t magic = kHelloMagic;
  uint64_t bytes = 0;     // the operation's size, the same on every rank
  uint64_t kind = 0;      // dtype << 8 | op, the same on every rank
  uint64_t readable = 0;  // 1: the kernel can read both buffers (Readable)
  uint64_t source = 0;    // address of the source
  uint64_t buffer = 0;    // address of the buffer (the result)
};

// "float32 sum" for a Hello's kind.
std::string KindName(uint64_t kind) {
  return std::string(DataTypeName(static_cast<DataType>(kind >> 8))) + " " +
         std::string(ReduceOpName(static_cast<ReduceOp>(kind & 0xff)));
}

// Sends `mine` to every peer and receives each peer's into theirs[peer] (theirs[rank] = mine).
template <typename T>
Status AllToAll(const Comm& comm, const T& mine, std::vector<T>* theirs) {
  theirs->assign(static_cast<size_t>(comm.size()), mine);
  return transport::ExchangeWithAll(*comm.transport, &mine, sizeof(T), theirs->data(),
                                    comm.idle_timeout);
}

// Whether process_vm_readv can read [p, p + n): not memory the kernel cannot pin, such as a
// device driver's mapping (VM_IO, VM_PFNMAP: some pinned host memory of a GPU runtime), which
// this process can read itself while a peer's read fails with EFAULT. Reads this process's own
// first and last byte, which share the mapping with the rest in every buffer we are given.
bool Readable(const void* p, size_t n) {
  const char* bytes = static_cast<const char*>(p);
  for (const char* at : {bytes, bytes + n - 1}) {
    char c;
    iovec to{&c, 1};
    iovec from{const_cast<char*>(at), 1};
    if (process_vm_readv(getpid(), &to, 1, &from, 1, 0) != 1) return false;
  }
  return true;
}

// Reads `bytes` at `remote` in process `pid` (rank `peer`) into `local`, whole.
Status ReadPeer(const Comm& comm, int peer, int pid, uint64_t remote, void* local, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec to{static_cast<char*>(local) + done, bytes - done};
    iovec from{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t got = process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : EFAULT;
      return Unavailable("process_vm_readv of " + std::to_string(bytes - done) + " bytes from " +
                         internal::PeerName(comm, peer) + ": " + base::ErrnoText(err));
    }
    done += static_cast<size_t>(got);
  }
  return Status::OK();
}

// The peers' process ids, or FailedPrecondition naming a peer that has none (not on this host).
Status PeerPids(const Comm& comm, std::vector<int>* pids) {
  pids->assign(static_cast<size_t>(comm.size()), -1);
  for (int p = 0; p < comm.size(); ++p) {
    if (p == comm.rank()) continue;
    const transport::Link* link = comm.transport->link(p);
    (*pids)[p] = link != nullptr ? link->peer_pid() : -1;
    if ((*pids)[p] == 0) {
      return FailedPrecondition(internal::PeerName(comm, p) +
                                " runs in another pid namespace: its process cannot be named here");
    }
    if ((*pids)[p] < 0) {
      return FailedPrecondition(internal::PeerName(comm, p) +
                                " is not reached through shared memory on this host");
    }
  }
  return Status::OK();
}

}  // namespace

Status SingleCopyAllreduce(const Comm& comm, const void* in, void* buf,
                           const std::vector<size_t>& off, DataType dtype, ReduceOp op,
                           double scale, bool* ran_ring) {
  if (ran_ring != nullptr) *ran_ring = false;
  const int n = comm.size(), r = comm.rank();
  if (op == ReduceOp::kAverage) {
    return InvalidArgument("single-copy allreduce: kAverage must be a sum followed by Scale");
  }
  if (off.size() != static_cast<size_t>(n) + 1) {
    return Internal("single-copy allreduce: " + std::to_string(off.size()) + " part offsets for " +
                    std::to_string(n) + " ranks");
  }
  const size_t es = DataTypeSize(dtype);
  const size_t bytes = off.back() * es;
  if (bytes == 0) return Status::OK();
  char* const out = static_cast<char*>(buf);
  const char* const source = in != nullptr ? static_cast<const char*>(in) : out;
  if (n == 1) {
    if (source != out) std::memcpy(out, source, bytes);
    if (scale != 1.0) Scale(out, off.back(), dtype, scale);
    return Status::OK();
  }
  std::vector<int> pids;
  HVD_RETURN_IF_ERROR(PeerPids(comm, &pids).WithContext("single-copy allreduce"));

  // 1: hello.
  Hello mine;
  mine.bytes = bytes;
  mine.kind = static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(op);
  mine.source = reinterpret_cast<uintptr_t>(source);
  mine.buffer = reinterpret_cast<uintptr_t>(out);
  mine.readable = Readable(source, bytes) && (source == out || Readable(out, bytes)) ? 1 : 0;
  std::vector<Hello> peers;
  HVD_RETURN_IF_ERROR(AllToAll(comm, mine, &peers).WithContext("single-copy allreduce: hello"));
  for (int p = 0; p < n; ++p) {
    if (peers[p].magic != kHelloMagic || peers[p].bytes != bytes || peers[p].kind != mine.kind) {
      return Internal("single-copy allreduce of " + std::to_string(bytes) + " bytes: " +
                      internal::PeerName(comm, p) + " runs another operation (it sent " +
                      (peers[p].magic == kHelloMagic
                           ? "a single-copy hello for " + std::to_string(peers[p].bytes) +
                                 " bytes of " + KindName(peers[p].kind)
                           : std::string("something else")) +
                      ", this rank " + KindName(mine.kind) +
                      "): the ranks disagree on the algorithm, the size or the type");
    }
  }
  // Memory a peer cannot read, on any rank: every rank saw every hello, so all take the ring
  // (nothing has been written yet).
  for (int p = 0; p < n; ++p) {
    if (peers[p].readable != 0) continue;
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      HVD_LOG(INFO) << "single-copy allreduce: " << internal::PeerName(comm, p)
                    << " reduces memory the kernel cannot read for its peers (a device "
                       "driver's mapping?): such allreduces take the ring";
    }
    if (ran_ring != nullptr) *ran_ring = true;
    return RingAllreduce(comm, in, buf, off, dtype, op, scale);
  }

  // 2: reduce the part this rank owns, i = r + 1, reading the sources from rank i around to r.
  const int owned = (r + 1) % n;
  // At most 4 MiB and the part, so that a large HVD_RING_CHUNK_BYTES cannot make every thread
  // keep gigabytes of scratch.
  const size_t piece_bytes = std::min<size_t>(4 * comm.ring_chunk_bytes, size_t{4} << 20);
  const size_t piece_elems =
      std::max<size_t>(1, std::min(piece_bytes / es, off[owned + 1] - off[owned]));
  char* scratch = internal::ThreadScratch(internal::Scratch::kSingleCopy, 2 * piece_elems * es);
  // Out of place, the part this rank owns is not read here again (its peers read it through the
  // kernel, from memory either way): written with non-temporal stores once input and output
  // together are as large as comm.stream_min_bytes. In place the kernel has just read each
  // line, and writing it around the cache measured slower (stream_copy.h).
  const bool stream = source != out && StreamsOutput(comm, bytes);
  for (size_t e = off[owned]; e < off[owned + 1]; e += piece_elems) {
    const size_t count = std::min(piece_elems, off[owned + 1] - e);
    const size_t at = e * es, len = count * es;
    char* acc = scratch;
    char* next = scratch + piece_elems * es;
    HVD_RETURN_IF_ERROR(ReadPeer(comm, owned, pids[owned], peers[owned].source + at, acc, len)
                            .WithContext("single-copy allreduce: reduce"));
    for (int k = 1; k < n - 1; ++k) {
      const int q = (owned + k) % n;
      HVD_RETURN_IF_ERROR(ReadPeer(comm, q, pids[q], peers[q].source + at, next, len)
                              .WithContext("single-copy allreduce: reduce"));
      ReduceInto(next, acc, count, dtype, op);
      std::swap(acc, next);
    }
    if (stream) {
      ReduceToStreamed(out + at, source + at, acc, nullptr, count, dtype, op, scale);
    } else {
      ReduceTo(out + at, source + at, acc, nullptr, count, dtype, op);  // out of place: no copy
      if (scale != 1.0) Scale(out + at, count, dtype, scale);
    }
  }

  // 3: every part is final once every rank says so.
  uint8_t phase = 3;
  std::vector<uint8_t> phases;
  HVD_RETURN_IF_ERROR(
      AllToAll(comm, phase, &phases).WithContext("single-copy allreduce: after the reduce"));

  // 4: gather the other parts from their owners.
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    const int part = (q + 1) % n;
    const size_t at = off[part] * es, len = (off[part + 1] - off[part]) * es;
    if (len == 0) continue;
    HVD_RETURN_IF_ERROR(ReadPeer(comm, q, pids[q], peers[q].buffer + at, out + at, len)
                            .WithContext("single-copy allreduce: gather"));
  }

  // 5: no rank returns while a peer may still read its buffer.
  phase = 5;
  HVD_RETURN_IF_ERROR(
      AllToAll(comm, phase, &phases).WithContext("single-copy allreduce: after the gather"));
  return Status::OK();
}

Status EnableSingleCopy(Comm* comm, size_t min_bytes, bool measure, std::string* why_not) {
  why_not->clear();
  comm->single_copy_min_bytes = 0;
  comm->single_copy_choice = nullptr;
  if (min_bytes == 0 || comm->size() < 2 || comm->hierarchy != nullptr) return Status::OK();
  const int n = comm->size(), r = comm->rank();
  std::vector<int> pids;
  Status local = PeerPids(*comm, &pids);
  if (!local.ok()) *why_not = local.message();

  // Each rank offers a word with a value of its own; the others read it through the kernel.
  struct Probe {
    uint64_t magic = kHelloMagic;
    uint64_t address = 0;
    uint64_t value = 0;
  };
  std::random_device seed;
  const uint64_t value = (uint64_t{seed()} << 32) ^ seed() ^ static_cast<uint64_t>(getpid());
  const volatile uint64_t word = value;
  Probe mine;
  mine.address = reinterpret_cast<uintptr_t>(&word);
  mine.value = value;
  std::vector<Probe> probes;
  HVD_RETURN_IF_ERROR(AllToAll(*comm, mine, &probes).WithContext("single-copy probe"));
  for (int p = 0; p < n && local.ok(); ++p) {
    if (p == r) continue;
    uint64_t got = 0;
    local = ReadPeer(*comm, p, pids[p], probes[p].address, &got, sizeof(got));
    if (!local.ok()) {
      *why_not = local.message();
    } else if (probes[p].magic != kHelloMagic || got != probes[p].value) {
      local = Internal("read a wrong value from " + internal::PeerName(*comm, p));
      *why_not = local.message() + " (is it in another pid namespace?)";
    }
  }
  // Only when every rank could read every other: the choice must be the same on every rank.
  const uint8_t ok = local.ok() ? 1 : 0;
  std::vector<uint8_t> oks;
  HVD_RETURN_IF_ERROR(AllToAll(*comm, ok, &oks).WithContext("single-copy probe"));
  std::string failed;
  for (int p = 0; p < n; ++p) {
    if (oks[p] == 0 && p != r)
      failed += (failed.empty() ? "" : ", ") + internal::PeerName(*comm, p);
  }
  if (!local.ok()) {
    if (why_not->find("EPERM") != std::string::npos) {
      *why_not +=
          " (kernel.yama.ptrace_scope 1 or more, or a seccomp profile, forbids reading a "
          "sibling process's memory)";
    }
    HVD_LOG(INFO) << "single-copy allreduce: this rank cannot read its peers' memory: " << *why_not;
  }
  if (!failed.empty() && why_not->empty()) {
    *why_not = failed + " could not read its peers' memory (its log says why)";
  }
  if (!why_not->empty()) return Status::OK();
  comm->single_copy_min_bytes = min_bytes;
  if (measure) comm->single_copy_choice = std::make_shared<SingleCopyChoice>();
  return Status::OK();
}

}  // namespace hvd::runtime::collectives
