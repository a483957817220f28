// Connects a rank to its peers and sets up the collectives' communicator from the environment:
// shared memory between ranks with the same host name, TCP between hosts (transport/connect.h),
// the hierarchy for jobs spanning hosts, and the algorithm thresholds. The settings that tune
// the data path are declared here, where they are read.
#include <algorithm>

#include "base/logging.h"
#include "base/settings.h"
#include "core/context.h"
#include "transport/connect.h"

namespace hvd::runtime::core {
namespace {

using base::kSameOnEveryRank;
using base::Setting;

constexpr int64_t kGiB = int64_t{1} << 30;

const Setting<std::string> kAdvertiseAddr(
    "HVD_ADVERTISE_ADDR", nullptr, "",
    "IPv4 address peers dial to reach this rank; unset: 127.0.0.1 when all ranks share a host");
const Setting<int64_t> kSocketBuffer("HVD_SOCKET_BUFFER_BYTES", nullptr, 0,
                                     "SO_SNDBUF/SO_RCVBUF for TCP links; 0 keeps kernel autotuning",
                                     {0, kGiB});
const Setting<bool> kShm("HVD_SHM", nullptr, true,
                         "shared memory between ranks with the same host name; 0: TCP everywhere",
                         kSameOnEveryRank);
const Setting<int64_t> kShmRing("HVD_SHM_RING_BYTES", nullptr, int64_t{1} << 20,
                                "bytes of each shared-memory ring (one per direction and local "
                                "peer); a power of two >= 4096",
                                {4096, kGiB});
const Setting<int64_t> kShmSpin("HVD_SHM_SPIN_MICROSECONDS", nullptr, 100,
                                "how long a rank waiting on shared memory polls before it sleeps "
                                "(0: no polling, and so no move off a CPU shared with a peer)",
                                {0, 10000000});
const Setting<int64_t> kDirectMaxShm(
    "HVD_DIRECT_ALLREDUCE_MAX_BYTES_SHM", nullptr, 64 << 10,
    "among ranks of one host, an allreduce takes the latency path instead of the ring while "
    "(ranks - 1) x its size is at most this",
    {0, kGiB}, kSameOnEveryRank);
const Setting<int64_t> kDirectMaxTcp("HVD_DIRECT_ALLREDUCE_MAX_BYTES_TCP", nullptr, 256 << 10,
                                     "the same over TCP links", {0, kGiB}, kSameOnEveryRank);
const Setting<int64_t> kRingChunk("HVD_RING_CHUNK_BYTES", nullptr, 256 << 10,
                                  "the ring moves each segment in chunks of about this size",
                                  {4096, kGiB}, kSameOnEveryRank);
// Across hosts a chunk crossing a link delays every gate waiting for it: without the look-ahead
// a ring moves about two chunks per one-way delay (docs/performance-fusion.md, "Tensor fusion
// across delayed links": 1 ms, 5 Gbit/s, a ResNet-50 step 325 ms; with 4 chunks of look-ahead 193
// ms, and the same as without it at 0 and 100 us). Within a host the ring forwards each chunk while
// it is in cache: no look-ahead there.
const Setting<int64_t> kRingLookaheadTcp(
    "HVD_RING_LOOKAHEAD_CHUNKS_TCP", nullptr, 4,
    "chunks a ring across hosts (TCP links) sends ahead of the ones it waits for; 0: one at a "
    "time",
    {0, 64}, kSameOnEveryRank);
// The chunk of rings across hosts, apart from the host's (a larger one did what the look-ahead
// does at 1 ms, and lost 1.3x where the relay decided the rate).
const Setting<int64_t> kRingChunkTcp("HVD_RING_CHUNK_BYTES_TCP", nullptr, 256 << 10,
                                     "the same for rings across hosts (TCP links)", {4096, kGiB},
                                     kSameOnEveryRank);
const Setting<int64_t> kSingleCopyMin(
    "HVD_SINGLE_COPY_MIN_BYTES", nullptr, 256 << 10,
    "among ranks of one host, allreduces of at least this size may read the peers' buffers "
    "through the kernel (process_vm_readv) instead of taking the ring; 0: never",
    {0, int64_t{1} << 62}, kSameOnEveryRank);
const Setting<bool> kSingleCopyMeasure(
    "HVD_SINGLE_COPY_MEASURE", nullptr, true,
    "choose between the ring and the single copy per size by their measured times; 0: the single "
    "copy always from HVD_SINGLE_COPY_MIN_BYTES",
    kSameOnEveryRank);
// An out-of-place output larger than the cache is written with non-temporal stores where the
// operation does not read it again (collectives/stream_copy.h). The default is the development VM's
// measured crossover (docs/performance-api.md, "Results written around the cache"): 2 ranks sharing
// a 32 MiB L3. Not kSameOnEveryRank: no other rank sees the difference.
const Setting<int64_t> kStreamMin(
    "HVD_STREAM_STORES_MIN_BYTES", nullptr, 32 << 20,
    "out-of-place allreduces whose input and output on a rank add up to at least this many bytes "
    "write the output with non-temporal stores, bypassing the cache (x86-64; elsewhere never); "
    "0: never",
    {0, int64_t{1} << 62});
const Setting<bool> kHierarchical(
    "HVD_HIERARCHICAL_ALLREDUCE", "HOROVOD_HIERARCHICAL_ALLREDUCE", true,
    "jobs on several hosts with equal ranks per host reduce within hosts first; 0: flat ring",
    kSameOnEveryRank);

}  // namespace

Status GpuHierarchicalRequested(bool* on) {
  std::string value, from;
  *on = false;
  if (!base::LookupEnv(kHierarchical.name(), "HOROVOD_HIERARCHICAL_ALLREDUCE", &value, &from)) {
    return Status::OK();
  }
  return kHierarchical.Get(on);
}

Status ConnectComm(rendezvous::Store& store, int rank, int size,
                   const std::vector<std::string>& hosts, std::chrono::milliseconds start_timeout,
                   const TransportWrap& wrap, std::unique_ptr<transport::Transport>* transport,
                   collectives::Comm* comm) {
  transport::ConnectOptions o;
  o.hosts = hosts;
  int64_t socket_buffer, ring, spin, direct_shm, direct_tcp, chunk, chunk_tcp, lookahead_tcp,
      single_copy, stream_min;
  bool hierarchical, measure;
  HVD_RETURN_IF_ERROR(kAdvertiseAddr.Get(&o.tcp.advertise_addr));
  HVD_RETURN_IF_ERROR(kSocketBuffer.Get(&socket_buffer));
  HVD_RETURN_IF_ERROR(kShm.Get(&o.use_shm));
  HVD_RETURN_IF_ERROR(kShmRing.Get(&ring));
  HVD_RETURN_IF_ERROR(kShmSpin.Get(&spin));
  HVD_RETURN_IF_ERROR(kDirectMaxShm.Get(&direct_shm));
  HVD_RETURN_IF_ERROR(kDirectMaxTcp.Get(&direct_tcp));
  HVD_RETURN_IF_ERROR(kRingChunk.Get(&chunk));
  HVD_RETURN_IF_ERROR(kRingChunkTcp.Get(&chunk_tcp));
  HVD_RETURN_IF_ERROR(kRingLookaheadTcp.Get(&lookahead_tcp));
  HVD_RETURN_IF_ERROR(kSingleCopyMin.Get(&single_copy));
  HVD_RETURN_IF_ERROR(kSingleCopyMeasure.Get(&measure));
  HVD_RETURN_IF_ERROR(kHierarchical.Get(&hierarchical));
  HVD_RETURN_IF_ERROR(kStreamMin.Get(&stream_min));
  const bool one_host =
      std::all_of(hosts.begin(), hosts.end(), [&](const std::string& h) { return h == hosts[0]; });
  if (size == 1) {
    *transport = NewSelfTransport();
  } else {
    if (o.tcp.advertise_addr.empty()) {
      if (!one_host) {
        return InvalidArgument(
            "the job's ranks run on several hosts but HVD_ADVERTISE_ADDR is not set on rank " +
            std::to_string(rank) + " (host " + hosts[rank] +
            "): set it to this host's IPv4 address that the other hosts can reach, or start "
            "the job with hvdrun, which chooses one");
      }
      o.tcp.advertise_addr = "127.0.0.1";
    }
    o.tcp.bind_addr = o.tcp.advertise_addr;
    o.tcp.scope = "tcp";
    o.tcp.connect_timeout = start_timeout;
    o.tcp.socket_buffer_bytes = static_cast<int>(socket_buffer);
    o.shm.scope = "shm";
    o.shm.connect_timeout = start_timeout;
    o.shm.ring_bytes = static_cast<size_t>(ring);
    o.shm.spin = std::chrono::microseconds(spin);
    HVD_RETURN_IF_ERROR_CTX(transport::Connect(store, rank, size, o, transport),
                            "connecting rank " + std::to_string(rank) + " to its peers");
  }
  if (wrap) *transport = wrap(std::move(*transport));
  comm->transport = transport->get();
  // The latency path pays off up to a size that depends on the links (docs/performance.md).
  const size_t within_host = static_cast<size_t>(o.use_shm ? direct_shm : direct_tcp);
  comm->direct_max_bytes = one_host ? within_host : static_cast<size_t>(direct_tcp);
  comm->ring_chunk_bytes = static_cast<size_t>(one_host ? chunk : chunk_tcp);
  comm->ring_lookahead_chunks = one_host ? 0 : static_cast<int>(lookahead_tcp);
  comm->stream_min_bytes = static_cast<size_t>(stream_min);
  if (hierarchical && size > 1) {
    std::shared_ptr<collectives::Hierarchy> h = collectives::MakeHierarchy(
        transport->get(), hosts, within_host, static_cast<size_t>(direct_tcp));
    if (h != nullptr) {
      h->local_ring_chunk_bytes = static_cast<size_t>(chunk);
      h->cross_ring_chunk_bytes = static_cast<size_t>(chunk_tcp);
      h->cross_ring_lookahead_chunks = static_cast<int>(lookahead_tcp);
    }
    comm->hierarchy = std::move(h);
  }
  if (one_host && o.use_shm && size > 1 && single_copy > 0) {
    std::string why_not;
    HVD_RETURN_IF_ERROR_CTX(
        collectives::EnableSingleCopy(comm, static_cast<size_t>(single_copy), measure, &why_not),
        "rank " + std::to_string(rank) + " probing the single-copy allreduce");
    if (!why_not.empty() && rank == 0) {  // a rank that could not read says why itself
      HVD_LOG(INFO) << "single-copy allreduce off (large allreduces take the ring): " << why_not;
    } else if (rank == 0) {
      HVD_LOG(INFO) << "single-copy allreduce on from " << single_copy
                    << " bytes (HVD_SINGLE_COPY_MIN_BYTES), "
                    << (measure ? "where measured faster than the ring (HVD_SINGLE_COPY_MEASURE)"
                                : "always (HVD_SINGLE_COPY_MEASURE=0)");
    }
  }
  return Status::OK();
}

}  // namespace hvd::runtime::core
