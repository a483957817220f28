// Pure-logic units of the engine: message encoding, the coordinator's decisions, the response
// cache's slot discipline, the fusion planner and the topology arithmetic.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/context.h"
#include "fusion/fusion_planner.h"
#include "negotiation/coordinator.h"
#include "negotiation/message.h"
#include "negotiation/response_cache.h"
#include "stall/stall_inspector.h"

namespace hvd::runtime {
namespace {

using negotiation::Coordinator;
using negotiation::OpType;
using negotiation::Request;
using negotiation::RequestList;
using negotiation::Response;
using negotiation::ResponseCache;
using negotiation::ResponseList;

Request Allreduce(int rank, const std::string& name, std::vector<int64_t> shape,
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.rank = rank;
  r.type = OpType::kAllreduce;
  r.key = name;
  r.tensors = {{name, dtype, std::move(shape)}};
  return r;
}

RequestList List(int rank, std::vector<Request> reqs) {
  RequestList l;
  l.rank = rank;
  l.requests = std::move(reqs);
  return l;
}

TEST(Message, RoundTripsAndRejectsGarbage) {
  RequestList in = List(3, {Allreduce(3, "a/b:0", {2, 3}), Allreduce(3, "c", {})});
  in.requests[1].type = OpType::kAlltoall;
  in.requests[1].splits = {1, 0, 2};
  in.requests[1].age_ms = 1234;
  RequestList out;
  ASSERT_TRUE(negotiation::Decode(negotiation::Encode(in), &out).ok());
  ASSERT_EQ(out.requests.size(), 2u);
  EXPECT_EQ(out.rank, 3);
  EXPECT_EQ(out.requests[0].tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(out.requests[1].splits, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(out.requests[1].age_ms, 1234);

  ResponseList rl;
  Response r;
  r.key = "k";
  r.error = "boom";
  r.first_dims = {1, 2};
  r.stalled_ranks = {2, 5};
  Response fine;  // no error: nothing after it (its stalled_ranks are not sent)
  fine.key = "ok";
  rl.responses = {r, fine, r};
  rl.joined_ranks = {1, 4};
  ResponseList back;
  ASSERT_TRUE(negotiation::Decode(negotiation::Encode(rl), &back).ok());
  ASSERT_EQ(back.responses.size(), 3u);
  EXPECT_EQ(back.responses[0].error, "boom");
  EXPECT_EQ(back.responses[0].stalled_ranks, (std::vector<int64_t>{2, 5}));
  EXPECT_TRUE(back.responses[1].ok());
  EXPECT_EQ(back.responses[2].stalled_ranks, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(back.joined_ranks, (std::vector<int32_t>{1, 4}));

  std::string bytes = negotiation::Encode(in);
  for (size_t cut : {size_t{0}, size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    RequestList junk;
    Status s = negotiation::Decode(bytes.substr(0, cut), &junk);
    EXPECT_FALSE(s.ok()) << "truncated at " << cut;
  }
  RequestList junk;
  EXPECT_FALSE(negotiation::Decode(bytes + "x", &junk).ok());
  EXPECT_FALSE(negotiation::Decode(std::string(64, '\xff'), &junk).ok());
}

TEST(Coordinator, ReadyOnlyWhenEveryRankSubmitted) {
  Coordinator c(3, 0, 0);
  auto now = Coordinator::Clock::now();
  c.Add(List(0, {Allreduce(0, "x", {4}), Allreduce(0, "y", {4})}), now);
  c.Add(List(1, {Allreduce(1, "y", {4}), Allreduce(1, "x", {4})}), now);
  EXPECT_TRUE(c.Compute(now).responses.empty());
  c.Add(List(2, {Allreduce(2, "y", {4})}), now);
  ResponseList out = c.Compute(now);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].key, "y");
  EXPECT_TRUE(out.responses[0].ok());
  ASSERT_EQ(c.Pending().size(), 1u);
  EXPECT_EQ(c.Pending()[0].missing, std::vector<int>{2});
  c.Add(List(2, {Allreduce(2, "x", {4})}), now);
  EXPECT_EQ(c.Compute(now).responses.at(0).key, "x");
}

TEST(Coordinator, MismatchNamesEveryRank) {
  Coordinator c(2, 0, 0);
  auto now = Coordinator::Clock::now();
  c.Add(List(0, {Allreduce(0, "g", {2, 3})}), now);
  c.Add(List(1, {Allreduce(1, "g", {3, 2}, DataType::kFloat16)}), now);
  ResponseList out = c.Compute(now);
  ASSERT_EQ(out.responses.size(), 1u);
  const std::string& e = out.responses[0].error;
  EXPECT_NE(e.find("rank 0 submitted allreduce float32 [2, 3]"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 1 submitted allreduce float16 [3, 2]"), std::string::npos) << e;
}

TEST(Coordinator, JoinedRanksCountAsReadyAndReleaseTogether) {
  Coordinator c(3, 0, 0);
  auto now = Coordinator::Clock::now();
  Request join;
  join.type = OpType::kJoin;
  join.key = "__join__";
  join.rank = 2;
  c.Add(List(2, {join}), now);
  c.Add(List(0, {Allreduce(0, "x", {4})}), now);
  c.Add(List(1, {Allreduce(1, "x", {4})}), now);
  ResponseList out = c.Compute(now);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.joined_ranks, std::vector<int32_t>{2});
  join.rank = 0;
  c.Add(List(0, {join}), now);
  join.rank = 1;
  c.Add(List(1, {join}), now);
  out = c.Compute(now);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].type, OpType::kJoin);
  EXPECT_EQ(out.responses[0].last_joined_rank, 1);
  EXPECT_TRUE(out.joined_ranks.empty());
}

TEST(Coordinator, StallShutdownFailsTheKeyNamingMissingRanks) {
  Coordinator c(3, 1, 2);
  auto now = Coordinator::Clock::now();
  Request r = Allreduce(0, "w", {1});
  r.age_ms = 2500;  // it waited on its rank before reaching the coordinator
  c.Add(List(0, {r}), now);
  c.Add(List(1, {Allreduce(1, "w", {1})}), now);
  ResponseList out = c.Compute(now);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_NE(out.responses[0].error.find("rank 2 has not submitted allreduce 'w'"),
            std::string::npos)
      << out.responses[0].error;
  EXPECT_NE(out.responses[0].error.find("after HVD_STALL_SHUTDOWN_TIME_SECONDS=2"),
            std::string::npos)
      << out.responses[0].error;
  // A stall verdict: the ranks failing it tell the launcher whom they failed for.
  EXPECT_EQ(out.responses[0].stalled_ranks, (std::vector<int64_t>{2}));
  ASSERT_EQ(c.verdicts().size(), 1u);
  EXPECT_EQ(c.verdicts()[0].pending.key, "w");
  EXPECT_EQ(c.verdicts()[0].pending.missing, (std::vector<int>{2}));
  EXPECT_EQ(c.verdicts()[0].pending.submitted, (std::vector<int>{0, 1}));
  EXPECT_TRUE(c.Pending().empty());
  c.Compute(now);
  EXPECT_TRUE(c.verdicts().empty());
}

TEST(Coordinator, RanksWaitingOnEachOtherAreNamedBothWays) {
  // Rank 0 reduces a then b, rank 1 b then a (synchronous calls): each waits for the other.
  Coordinator c(3, 1, 2);
  auto now = Coordinator::Clock::now();
  c.Add(List(0, {Allreduce(0, "a", {1})}), now);
  c.Add(List(1, {Allreduce(1, "b", {1})}), now);
  c.Add(List(2, {Allreduce(2, "a", {1}), Allreduce(2, "b", {1})}), now);
  c.Compute(now);
  stall::PendingKey oldest;
  ASSERT_TRUE(c.OldestStall(now + std::chrono::milliseconds(1500), &oldest));
  EXPECT_EQ(oldest.key, "a");
  EXPECT_EQ(oldest.crossing, "rank 1 has submitted allreduce 'b', which rank 0 has not");
  // The verdict's message says it too.
  ResponseList out = c.Compute(now + std::chrono::seconds(3));
  ASSERT_EQ(out.responses.size(), 2u);
  EXPECT_NE(out.responses[0].error.find("rank 1 has not submitted allreduce 'a' for 3 s (ranks 0, "
                                        "2 have); rank 1 has submitted allreduce 'b', which rank "
                                        "0 has not: the ranks wait on each other"),
            std::string::npos)
      << out.responses[0].error;

  // A rank that is merely behind crosses nothing: rank 2 has submitted neither x nor y.
  Coordinator behind(3, 1, 0);
  behind.Add(List(0, {Allreduce(0, "x", {1}), Allreduce(0, "y", {1})}), now);
  behind.Add(List(1, {Allreduce(1, "x", {1})}), now);
  behind.Compute(now);
  ASSERT_TRUE(behind.OldestStall(now + std::chrono::seconds(2), &oldest));
  EXPECT_EQ(oldest.crossing, "") << oldest.key;
  EXPECT_EQ(stall::CrossingText(oldest), "");
}

TEST(StallInspector, VerdictsOldestFirstGetTheCrossingsAWarningWouldTake) {
  // Six old keys rank 1 has not submitted, each crossed by a young key rank 0 has not; named so
  // that the table's (name) order is the reverse of their age. One call looks for 4 crossings:
  // they go to the verdicts, oldest first, and the verdicts come oldest first.
  const auto now = stall::Clock::now();
  std::vector<stall::PendingKey> pending;
  const std::vector<std::string> by_age = {"z", "y", "x", "w", "v", "u"};
  for (size_t i = 0; i < by_age.size(); ++i) {
    pending.push_back({by_age[i], "allreduce", {0}, {1}, now - std::chrono::seconds(20 - i), ""});
  }
  pending.push_back({"c", "allreduce", {1}, {0}, now, ""});
  std::sort(pending.begin(), pending.end(),
            [](const stall::PendingKey& a, const stall::PendingKey& b) { return a.key < b.key; });
  stall::StallInspector inspector(1, 5);
  const std::vector<stall::StallVerdict> verdicts = inspector.Inspect(pending, now);
  ASSERT_EQ(verdicts.size(), by_age.size());
  for (size_t i = 0; i < verdicts.size(); ++i) {
    EXPECT_EQ(verdicts[i].pending.key, by_age[i]);
    EXPECT_EQ(verdicts[i].pending.crossing.empty(), i >= 4) << by_age[i];
  }
  EXPECT_EQ(verdicts[0].pending.crossing,
            "rank 1 has submitted allreduce 'c', which rank 0 has not");
  EXPECT_NE(verdicts[0].message.find("the ranks wait on each other"), std::string::npos)
      << verdicts[0].message;
}

Response Cached(const std::string& key, int64_t n) {
  Response r;
  r.type = OpType::kAllreduce;
  r.key = key;
  r.tensors = {{key, DataType::kFloat32, {n}}};
  return r;
}

TEST(ResponseCache, HitStaleMissAndLruEviction) {
  ResponseCache cache(2);
  uint32_t slot = 99;
  EXPECT_EQ(cache.Lookup(Allreduce(0, "a", {4}), 0, &slot), ResponseCache::Match::kMiss);
  cache.Put(Cached("a", 4));
  cache.Put(Cached("b", 4));
  EXPECT_EQ(cache.Lookup(Allreduce(0, "a", {4}), 0, &slot), ResponseCache::Match::kHit);
  EXPECT_EQ(slot, 0u);
  EXPECT_EQ(cache.Lookup(Allreduce(0, "a", {5}), 0, &slot), ResponseCache::Match::kStale);
  cache.Touch(0);  // "a" recently used: "b" is evicted next
  cache.Put(Cached("c", 4));
  EXPECT_EQ(cache.Lookup(Allreduce(0, "b", {4}), 0, &slot), ResponseCache::Match::kMiss);
  EXPECT_EQ(cache.Lookup(Allreduce(0, "c", {4}), 0, &slot), ResponseCache::Match::kHit);
  EXPECT_EQ(slot, 1u);  // the freed slot is reused, keeping the bit vector short
  EXPECT_EQ(cache.used_slots(), 2u);
  uint64_t gen = cache.generation();
  cache.Erase(1);
  EXPECT_GT(cache.generation(), gen);
  EXPECT_EQ(cache.used_slots(), 1u);

  ResponseCache off(0);
  off.Put(Cached("a", 4));
  EXPECT_EQ(off.Lookup(Allreduce(0, "a", {4}), 0, &slot), ResponseCache::Match::kMiss);
}

TEST(ResponseCache, AllgatherMatchesThisRanksRows) {
  ResponseCache cache(4);
  Response r;
  r.type = OpType::kAllgather;
  r.key = "g";
  r.tensors = {{"g", DataType::kInt32, {2, 3}}};
  r.first_dims = {2, 5};
  cache.Put(r);
  Request q;
  q.type = OpType::kAllgather;
  q.key = "g";
  q.tensors = {{"g", DataType::kInt32, {5, 3}}};
  uint32_t slot;
  EXPECT_EQ(cache.Lookup(q, 1, &slot), ResponseCache::Match::kHit);
  EXPECT_EQ(cache.Lookup(q, 0, &slot), ResponseCache::Match::kStale);
}

TEST(FusionPlanner, FusesCompatibleAllreducesUnderTheThreshold) {
  std::vector<Response> rs = {Cached("a", 10), Cached("b", 10), Cached("c", 10), Cached("d", 100)};
  rs[1].reduce_op = ReduceOp::kMax;  // cannot fuse with a
  rs[2].tensors[0].dtype = DataType::kFloat32;
  Response bcast;
  bcast.type = OpType::kBroadcast;
  bcast.key = "w";
  bcast.tensors = {{"w", DataType::kFloat32, {3}}};
  rs.push_back(bcast);
  Response failed = Cached("e", 1);
  failed.error = "mismatch";
  rs.push_back(failed);

  auto batches = fusion::PlanBatches(rs, {100, 0});  // bytes
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].items.size(), 2u);  // a + c (40 + 40 bytes)
  EXPECT_EQ(batches[0].items[1].response, 2u);
  EXPECT_EQ(batches[1].items[0].response, 1u);  // b alone
  EXPECT_EQ(batches[2].items[0].response, 3u);  // d is larger than the threshold
  EXPECT_EQ(batches[3].items[0].response, 4u);  // the broadcast; the failed one is not run

  auto unfused = fusion::PlanBatches(rs, {0, 0});
  EXPECT_EQ(unfused.size(), 5u);
}

TEST(FusionPlanner, OneResponsePlansAsTheGeneralLoopDoes) {
  // PlanBatches takes a shortcut for one response of at most one tensor; a copy of it followed by
  // an empty broadcast takes the general loop, whose first batch must be the same.
  Response barrier;
  barrier.type = OpType::kBarrier;
  barrier.key = "barrier";
  Response bcast;
  bcast.type = OpType::kBroadcast;
  bcast.key = "w";
  bcast.tensors = {{"w", DataType::kFloat32, {300}}};
  Response failed = Cached("e", 1);
  failed.error = "mismatch";
  Response large_gpu = Cached("G", 100);
  large_gpu.gpu = true;
  Response tail;
  tail.type = OpType::kBarrier;
  tail.key = "tail";
  std::vector<fusion::Batch> reused;  // planned into again and again, as the executor does
  for (const Response& r : {Cached("a", 10), Cached("B", 100), large_gpu, barrier, bcast, failed}) {
    fusion::PlanBatches({Cached("x", 1), Cached("y", 1), Cached("z", 1)}, {1 << 20, 100}, &reused);
    fusion::PlanBatches({r}, {1 << 20, 100}, &reused);
    const std::vector<fusion::Batch> general = fusion::PlanBatches({r, tail}, {1 << 20, 100});
    SCOPED_TRACE(r.key);
    ASSERT_EQ(reused.size(), r.ok() ? 1u : 0u);
    ASSERT_EQ(general.size(), r.ok() ? 2u : 1u);
    if (!r.ok()) continue;
    ASSERT_EQ(reused[0].items.size(), 1u);
    EXPECT_EQ(reused[0].items[0].response, 0u);
    EXPECT_EQ(reused[0].items[0].tensor, 0u);
    EXPECT_EQ(reused[0].items[0].in_place, general[0].items[0].in_place);
    EXPECT_EQ(reused[0].bytes, general[0].bytes);
  }
  fusion::PlanBatches({Cached("B", 100)}, {1 << 20, 100}, &reused);
  EXPECT_TRUE(reused[0].items[0].in_place);  // a large host tensor, as in the general loop
  EXPECT_EQ(reused[0].bytes, 400);
}

TEST(FusionPlanner, LargeHostTensorsJoinInPlaceAndLargeDeviceOnesRunAlone) {
  // float32 x count: 40, 400, 40, 400, 40 bytes; tensors above 100 bytes are never packed.
  std::vector<Response> rs = {Cached("a", 10), Cached("B", 100), Cached("c", 10), Cached("D", 100),
                              Cached("e", 10)};
  auto batches = fusion::PlanBatches(rs, {1 << 20, 100});
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].items.size(), 5u);  // in response order, B and D in place
  EXPECT_EQ(batches[0].bytes, 920);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(batches[0].items[i].response, i);
    EXPECT_EQ(batches[0].items[i].in_place, i == 1 || i == 3) << i;
  }
  // A large head pulls the others in too; the threshold counts in-place bytes.
  auto two = fusion::PlanBatches({rs[1], rs[0], rs[3]}, {500, 100});
  ASSERT_EQ(two.size(), 2u);
  ASSERT_EQ(two[0].items.size(), 2u);  // B (in place) + a; D would pass 500 bytes
  EXPECT_TRUE(two[0].items[0].in_place);
  EXPECT_FALSE(two[0].items[1].in_place);
  EXPECT_TRUE(two[1].items[0].in_place);

  // A tensor exactly at the limit is packed; 0 means no limit.
  for (size_t limit : {400, 0}) {
    auto all = fusion::PlanBatches(rs, {1 << 20, static_cast<int64_t>(limit)});
    ASSERT_EQ(all.size(), 1u);
    for (const auto& it : all[0].items) EXPECT_FALSE(it.in_place) << limit;
  }

  // Device tensors: the large ones run alone, the small ones around them still fuse.
  for (Response& r : rs) r.gpu = true;
  batches = fusion::PlanBatches(rs, {1 << 20, 100});
  ASSERT_EQ(batches.size(), 3u);
  ASSERT_EQ(batches[0].items.size(), 3u);  // a, c, e: pulled forward past B and D
  EXPECT_EQ(batches[0].items[1].response, 2u);
  EXPECT_EQ(batches[0].items[2].response, 4u);
  EXPECT_EQ(batches[0].bytes, 120);
  ASSERT_EQ(batches[1].items.size(), 1u);
  EXPECT_EQ(batches[1].items[0].response, 1u);
  EXPECT_FALSE(batches[1].items[0].in_place);
  ASSERT_EQ(batches[2].items.size(), 1u);
  EXPECT_EQ(batches[2].items[0].response, 3u);
}

// GPU operations (Request::gpu): carried on the wire, agreed by every rank, cached with the flag,
// and never fused with host tensors.
TEST(GpuFlag, TravelsMustAgreeAndNeverFusesWithHost) {
  RequestList in = List(0, {Allreduce(0, "g", {4})});
  in.requests[0].gpu = true;
  RequestList out;
  ASSERT_TRUE(negotiation::Decode(negotiation::Encode(in), &out).ok());
  EXPECT_TRUE(out.requests[0].gpu);

  Coordinator c(2, 0, 0);
  auto now = Coordinator::Clock::now();
  c.Add(in, now);
  c.Add(List(1, {Allreduce(1, "g", {4})}), now);
  ResponseList rl = c.Compute(now);
  ASSERT_EQ(rl.responses.size(), 1u);
  const std::string& e = rl.responses[0].error;
  EXPECT_NE(e.find("rank 0 submitted allreduce float32 [4] on a GPU op=sum;"), std::string::npos)
      << e;
  EXPECT_NE(e.find("same kind of memory"), std::string::npos) << e;

  Coordinator agree(2, 0, 0);
  Request r1 = Allreduce(1, "g", {4});
  r1.gpu = true;
  agree.Add(in, now);
  agree.Add(List(1, {r1}), now);
  rl = agree.Compute(now);
  ASSERT_EQ(rl.responses.size(), 1u);
  EXPECT_TRUE(rl.responses[0].ok()) << rl.responses[0].error;
  EXPECT_TRUE(rl.responses[0].gpu);
  ResponseList back;
  ASSERT_TRUE(negotiation::Decode(negotiation::Encode(rl), &back).ok());
  EXPECT_TRUE(back.responses[0].gpu);

  ResponseCache cache(4);
  cache.Put(rl.responses[0]);
  uint32_t slot = 0;
  EXPECT_EQ(cache.Lookup(r1, 1, &slot), ResponseCache::Match::kHit);
  EXPECT_EQ(cache.Lookup(Allreduce(1, "g", {4}), 1, &slot), ResponseCache::Match::kStale);

  std::vector<Response> rs = {Cached("a", 10), Cached("b", 10), Cached("c", 10)};
  rs[1].gpu = true;
  rs[2].gpu = true;
  auto batches = fusion::PlanBatches(rs, {1000, 0});
  ASSERT_EQ(batches.size(), 2u);  // a alone (host), b + c (GPU)
  EXPECT_EQ(batches[1].items.size(), 2u);
}

TEST(Topology, MatchesHorovodDefinitions) {
  std::vector<std::string> hosts = {"a", "a", "b", "b", "b", "c"};
  struct Want {
    int local_rank, local_size, cross_rank, cross_size;
  } want[] = {{0, 2, 0, 3}, {1, 2, 0, 2}, {0, 3, 1, 3}, {1, 3, 1, 2}, {2, 3, 0, 1}, {0, 1, 2, 3}};
  for (int r = 0; r < 6; ++r) {
    core::Topology t = core::ComputeTopology(r, hosts);
    EXPECT_EQ(t.local_rank, want[r].local_rank) << "rank " << r;
    EXPECT_EQ(t.local_size, want[r].local_size) << "rank " << r;
    EXPECT_EQ(t.cross_rank, want[r].cross_rank) << "rank " << r;
    EXPECT_EQ(t.cross_size, want[r].cross_size) << "rank " << r;
  }
}

}  // namespace
}  // namespace hvd::runtime
