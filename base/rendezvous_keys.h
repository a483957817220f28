// The rendezvous key scheme: the one place that builds and parses the keys the runtime writes to
// the rendezvous store and hvd-launcherd reads (docs/rendezvous.md has the values):
//
//   job/<id>/                  everything of one job: what its secret may touch, dropped when
//                              the job ends
//   job/<id>/attempt/<n>/      one attempt (HVD_ATTEMPT, 0 first), dropped when the next starts
//     host/<rank>              hvd::Init's meeting: size, host, job-wide settings
//     stall/<rank>             the rank's stall report (runtime/stall/stall_reporter.h)
//     abort/<rank>             the rank is about to fail because of a peer
//     absent/<worker>          an elastic worker waited HVD_PEER_TIMEOUT_SECONDS at a re-form
//                              meeting for workers it had run with: "<generation> <ids> <ms>"
//                              (ElasticAbsence); the launcher stops them (docs/elastic.md)
//     committed/<worker>       an elastic worker saved a synced state (its generation); a
//                              shrink by the discovery script waits for the next rank 0's
//     init/<k>/...             the k-th re-Init of the same processes (k >= 1): its own host/
//                              and transport keys
//     elastic/latest           an elastic job's newest membership generation ("3"), written by
//                              the launcher after the generation itself:
//     elastic/gen/<g>          generation g's worker ids in rank order ("0,1,3"; written once)
//     elastic/finished         "worker 3 on host-b": a worker finished while others lived
//     elastic/<g>/init/<k>/... the k-th meeting of generation g (but the first meeting of
//                              generation 0, which is the attempt's own host/ keys):
//                              host/ and transport keys, and "decide", "outcome"
//                              (runtime/core/elastic.h)
//     nccl/<set>/<gen>/...     the NCCL unique-id exchange of process set <set>'s communicator,
//                              generation <gen> (runtime/gpu/nccl_bootstrap.h): "id",
//                              "arrived/<rank>", "abort"
//   The transports keep their addresses under the scope they are given ("tcp/tcp/<rank>",
//   "shm/shm/<rank>", ...): only ranks read them (runtime/transport/).
//
// The launcher watches host/, stall/, abort/, absent/ and committed/ keys of an attempt
// (ParseRankKey), and
// the host/ keys of later elastic meetings (ParseElasticMeetingKey).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/status.h"

namespace hvd::base {

// "job/<id>/": a job's keys, the prefix its secret grants (ends with '/', so that "job/1/" does
// not cover "job/10/").
std::string JobPrefix(std::string_view job_id);
// "job/<id>/attempt/<n>": the scope of one attempt's keys (a PrefixStore adds the '/').
std::string AttemptScope(std::string_view job_id, int64_t attempt);
// AttemptScope + "/": what the launcher drops when the attempt ends.
std::string AttemptPrefix(std::string_view job_id, int64_t attempt);
// The scope of the k-th re-Init (k >= 1) under an attempt's scope: "<scope>/init/<k>".
std::string IncarnationScope(std::string_view attempt_scope, int incarnation);

// An elastic job's membership, relative to the attempt's scope: "elastic/latest" and
// "elastic/gen/<g>".
std::string ElasticLatestKey();
// "elastic/finished": a worker finished (exit 0) while others lived; its name. The job ends as
// its workers do: an Init() that would re-form it fails at once instead.
std::string ElasticFinishedKey();
std::string ElasticGenerationKey(int64_t generation);
// ElasticGenerationKey's value: worker ids "3,0,5" <-> {3, 0, 5}. InvalidArgument naming the text
// when it is not a list of ids.
Status ParseElasticWorkers(const std::string& text, std::vector<int>* out);
std::string FormatElasticWorkers(const std::vector<int>& workers);

// An absent/<worker> key's value: the workers a re-forming worker waited for in vain in
// `generation`, and how long it had waited ("4 2,5 60000" <-> {4, {2, 5}, 60000}).
// InvalidArgument naming the text when malformed.
struct ElasticAbsence {
  int64_t generation = 0;
  std::vector<int> workers;
  int64_t waited_ms = 0;
};
std::string FormatElasticAbsence(const ElasticAbsence& a);
Status ParseElasticAbsence(const std::string& text, ElasticAbsence* out);

// The keys of one rank under an attempt's scope.
// kCommitted ("committed/<worker>", an elastic worker's, its value the generation it joined): the
// worker saved a state synced with the others (hvd::ElasticCommitted, at a commit), so the
// launcher may count it as holding the training state.
enum class RankKeyKind { kHost, kStall, kAbort, kAbsent, kCommitted };
// "host", "stall", "abort", "absent", "committed".
const char* RankKeyKindName(RankKeyKind kind);
// "host/3", relative to the attempt's scope.
std::string RankKey(RankKeyKind kind, int rank);

// The NCCL unique-id exchange's keys, relative to the attempt's scope. A communicator is named by
// its process set's id and a generation that grows each time the set's communicator is rebuilt,
// so a rebuilt communicator never reads the id of the one before.
// "nccl/<set>/<gen>/id": the 128-byte ncclUniqueId, written by the set's rank 0.
std::string NcclIdKey(int set_id, uint64_t generation);
// "nccl/<set>/<gen>/arrived/<rank>": written by each set rank as it enters the exchange.
std::string NcclArrivedKey(int set_id, uint64_t generation, int rank);
// "nccl/<set>/<gen>/abort": the reason the exchange was given up, written by any rank.
std::string NcclAbortKey(int set_id, uint64_t generation);

// "job/<id>/" of a key under a job (the quota it counts against); "" for any other key.
std::string JobPrefixOf(std::string_view key);

// A full rank key, "job/<id>/attempt/<n>/<kind>/<rank>", taken apart.
struct RankKeyParts {
  std::string job_id;
  int64_t attempt = 0;
  RankKeyKind kind = RankKeyKind::kHost;
  int rank = 0;
};
// InvalidArgument naming the key and what is wrong with it (not under job/<id>/attempt/<n>/, an
// attempt or rank that is not a decimal number, a kind other than host, stall, abort, absent or
// committed, or more parts, as the re-Init keys under init/<k>/ have: only a process's first
// meeting counts).
Status ParseRankKey(std::string_view key, RankKeyParts* out);

// Where generation g's k-th meeting keeps its keys under the attempt's scope: the scope itself
// for generation 0's first, "<attempt scope>/elastic/<g>/init/<k>" for any other.
std::string ElasticMeetingScope(std::string_view attempt_scope, int64_t generation, int session);
// An elastic meeting's host key, "job/<id>/attempt/<n>/elastic/<g>/init/<k>/host/<r>": the
// worker at index r of generation g's member list arrived at that generation's k-th meeting.
struct ElasticMeetingKeyParts {
  std::string job_id;
  int64_t attempt = 0;
  int64_t generation = 0;
  int index = 0;
};
// False for any other key (no error: most keys under an attempt are not these).
bool ParseElasticMeetingKey(std::string_view key, ElasticMeetingKeyParts* out);

}  // namespace hvd::base
