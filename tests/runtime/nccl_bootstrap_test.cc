// runtime/gpu/nccl_bootstrap.h: the NCCL unique-id exchange through the rendezvous store, on the
// CPU (the id is an opaque 128-byte blob; no CUDA or NCCL is involved). Ranks are threads over a
// memory store scoped like the runtime's (job/attempt prefix), and forked processes over a file
// store.
#include "gpu/nccl_bootstrap.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/rendezvous_keys.h"
#include "rendezvous/store.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// 128 bytes with NULs, high bytes and a pattern that depends on `seed`.
std::string Blob(int seed) {
  std::string b(kNcclIdBytes, '\0');
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<char>((i * 37 + seed * 11) % 256);
  }
  b[0] = '\0';
  b[64] = '\0';
  b[127] = static_cast<char>(0xff);
  return b;
}

std::function<Status(std::string*)> MakeId(std::string blob) {
  return [blob](std::string* out) {
    *out = blob;
    return Status::OK();
  };
}

NcclIdExchange Exchange(int rank, int size, uint64_t generation = 1, int set_id = 0,
                        milliseconds timeout = milliseconds(10000)) {
  NcclIdExchange x;
  x.set_id = set_id;
  x.generation = generation;
  x.rank = rank;
  x.size = size;
  x.timeout = timeout;
  return x;
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A memory store and the job/attempt-scoped view the runtime would pass.
struct ScopedStore {
  std::unique_ptr<rendezvous::Store> base = rendezvous::NewMemoryStore();
  std::unique_ptr<rendezvous::Store> scoped =
      rendezvous::NewPrefixStore(base::AttemptScope("j1", 0), base.get());
};

// Runs ranks [first, size) of one exchange on threads; results by rank.
struct ThreadRun {
  std::vector<Status> status;
  std::vector<std::string> id;
  std::vector<milliseconds> elapsed;
};

ThreadRun RunThreads(rendezvous::Store& store, int size, const std::vector<int>& ranks,
                     const std::function<NcclIdExchange(int)>& exchange,
                     const std::function<Status(std::string*)>& make_id,
                     const std::function<Status()>& cancelled = {}) {
  ThreadRun run;
  run.status.resize(size);
  run.id.resize(size);
  run.elapsed.resize(size);
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      const auto start = Clock::now();
      run.status[r] = ExchangeNcclId(store, exchange(r), make_id, cancelled, &run.id[r]);
      run.elapsed[r] = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

std::vector<int> AllRanks(int size) {
  std::vector<int> v;
  for (int r = 0; r < size; ++r) v.push_back(r);
  return v;
}

TEST(NcclBootstrapTest, KeysSpellTheSchemeAndAreNotRankKeys) {
  EXPECT_EQ(base::NcclIdKey(2, 7), "nccl/2/7/id");
  EXPECT_EQ(base::NcclArrivedKey(0, 1, 3), "nccl/0/1/arrived/3");
  EXPECT_EQ(base::NcclAbortKey(5, 18446744073709551615ull), "nccl/5/18446744073709551615/abort");
  // The launcher supervises only rank keys; the exchange's keys must not look like one.
  base::RankKeyParts parts;
  EXPECT_FALSE(
      base::ParseRankKey(base::AttemptScope("j", 0) + "/" + base::NcclAbortKey(0, 1), &parts).ok());
}

TEST(NcclBootstrapTest, TheIdArrivesIntactAtEveryRank) {
  for (int size : {1, 2, 5}) {
    ScopedStore s;
    const std::string blob = Blob(size);
    ThreadRun run = RunThreads(
        *s.scoped, size, AllRanks(size), [&](int r) { return Exchange(r, size); }, MakeId(blob));
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(run.status[r].ok())
          << "size " << size << " rank " << r << ": " << run.status[r].ToString();
      EXPECT_EQ(run.id[r], blob) << "size " << size << " rank " << r;
    }
    // The keys live under the job/attempt scope the caller gave.
    std::string raw;
    EXPECT_TRUE(s.base->Get("job/j1/attempt/0/nccl/0/1/id", &raw).ok());
    EXPECT_EQ(raw, blob);
  }
}

TEST(NcclBootstrapTest, OnlyRankZeroMakesTheId) {
  ScopedStore s;
  std::atomic<int> calls{0};
  auto make = [&](std::string* out) {
    ++calls;
    *out = Blob(3);
    return Status::OK();
  };
  ThreadRun run = RunThreads(
      *s.scoped, 4, AllRanks(4), [](int r) { return Exchange(r, 4); }, make);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(run.status[r].ok()) << run.status[r].ToString();
  EXPECT_EQ(calls.load(), 1);
}

TEST(NcclBootstrapTest, ASecondGenerationNeverReadsTheFirstsId) {
  ScopedStore s;
  ThreadRun first = RunThreads(
      *s.scoped, 2, AllRanks(2), [](int r) { return Exchange(r, 2, 1); }, MakeId(Blob(1)));
  ASSERT_TRUE(first.status[1].ok()) << first.status[1].ToString();
  // Generation 2 without its rank 0: rank 1 must time out, not pick up generation 1's id.
  ThreadRun lone = RunThreads(
      *s.scoped, 2, {1}, [](int r) { return Exchange(r, 2, 2, 0, milliseconds(300)); },
      MakeId(Blob(2)));
  EXPECT_EQ(lone.status[1].code(), StatusCode::kDeadlineExceeded) << lone.status[1].ToString();
  EXPECT_TRUE(lone.id[1].empty());
  // With its rank 0, generation 2 gets its own id; another set is separate too.
  ThreadRun second = RunThreads(
      *s.scoped, 2, AllRanks(2), [](int r) { return Exchange(r, 2, 2); }, MakeId(Blob(2)));
  ASSERT_TRUE(second.status[1].ok()) << second.status[1].ToString();
  EXPECT_EQ(second.id[1], Blob(2));
  ThreadRun other = RunThreads(
      *s.scoped, 2, AllRanks(2), [](int r) { return Exchange(r, 2, 1, 3); }, MakeId(Blob(9)));
  ASSERT_TRUE(other.status[1].ok()) << other.status[1].ToString();
  EXPECT_EQ(other.id[1], Blob(9));
}

TEST(NcclBootstrapTest, AMissingRankZeroGivesDeadlineExceededNamingIt) {
  ScopedStore s;
  auto exchange = [](int r) {
    NcclIdExchange x = Exchange(r, 3, 4, 1, milliseconds(700));
    x.job_ranks = {6, 7, 8};
    return x;
  };
  ThreadRun run = RunThreads(*s.scoped, 3, {1, 2}, exchange, MakeId(Blob(0)));
  for (int r : {1, 2}) {
    const Status& st = run.status[r];
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
    EXPECT_TRUE(Contains(st.message(), "rank 0 (job rank 6) did not publish")) << st.message();
    EXPECT_TRUE(Contains(st.message(), s.scoped->Describe())) << st.message();
    EXPECT_TRUE(Contains(st.message(), "within 700 ms (waited ")) << st.message();
    EXPECT_GE(run.elapsed[r], milliseconds(700));
    EXPECT_LT(run.elapsed[r], milliseconds(1700));
  }
  // The ranks that did arrive said so; rank 0 is the one missing.
  std::vector<int> missing;
  ASSERT_TRUE(MissingNcclRanks(*s.scoped, exchange(1), &missing).ok());
  EXPECT_EQ(missing, std::vector<int>{0});
  EXPECT_EQ(DescribeMissingRanks(missing, {6, 7, 8}), "rank 0 (job rank 6) never arrived");
}

TEST(NcclBootstrapTest, TheAbortKeyWakesWaitersWithItsReason) {
  ScopedStore s;
  std::thread aborter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    EXPECT_TRUE(AbortNcclExchange(*s.scoped, 0, 1, "rank 0 lost its GPU").ok());
  });
  ThreadRun run = RunThreads(
      *s.scoped, 4, {1, 2, 3}, [](int r) { return Exchange(r, 4, 1, 0, milliseconds(20000)); },
      MakeId(Blob(0)));
  aborter.join();
  for (int r : {1, 2, 3}) {
    EXPECT_EQ(run.status[r].code(), StatusCode::kAborted) << run.status[r].ToString();
    EXPECT_TRUE(Contains(run.status[r].message(), "rank 0 lost its GPU"))
        << run.status[r].message();
    EXPECT_LT(run.elapsed[r], milliseconds(1000));
  }
  // Rank 0 coming late refuses to publish for an exchange already given up.
  ThreadRun late = RunThreads(
      *s.scoped, 4, {0}, [](int r) { return Exchange(r, 4); }, MakeId(Blob(0)));
  EXPECT_EQ(late.status[0].code(), StatusCode::kAborted) << late.status[0].ToString();
  std::string id;
  EXPECT_EQ(s.scoped->Get(base::NcclIdKey(0, 1), &id).code(), StatusCode::kNotFound);
}

TEST(NcclBootstrapTest, CancelledWins) {
  ScopedStore s;
  std::atomic<bool> stop{false};
  auto cancelled = [&]() -> Status {
    return stop ? Aborted("hvd is shutting down") : Status::OK();
  };
  std::thread stopper([&] {
    std::this_thread::sleep_for(milliseconds(200));
    stop = true;
  });
  ThreadRun run = RunThreads(
      *s.scoped, 2, {1}, [](int r) { return Exchange(r, 2, 1, 0, milliseconds(20000)); },
      MakeId(Blob(0)), cancelled);
  stopper.join();
  EXPECT_EQ(run.status[1].code(), StatusCode::kAborted) << run.status[1].ToString();
  EXPECT_EQ(run.status[1].message(), "hvd is shutting down");
  EXPECT_LT(run.elapsed[1], milliseconds(1000));
}

TEST(NcclBootstrapTest, AWrongSizeIdIsRefused) {
  // Made by rank 0: refused there, and the others are told at once through the abort key.
  ScopedStore s;
  ThreadRun run = RunThreads(
      *s.scoped, 3, AllRanks(3), [](int r) { return Exchange(r, 3, 1, 0, milliseconds(20000)); },
      MakeId(std::string(127, 'x')));
  EXPECT_EQ(run.status[0].code(), StatusCode::kInvalidArgument) << run.status[0].ToString();
  EXPECT_TRUE(Contains(run.status[0].message(), "is 127 bytes, not 128"))
      << run.status[0].message();
  for (int r : {1, 2}) {
    EXPECT_EQ(run.status[r].code(), StatusCode::kAborted) << run.status[r].ToString();
    EXPECT_TRUE(Contains(run.status[r].message(), "127 bytes")) << run.status[r].message();
    EXPECT_LT(run.elapsed[r], milliseconds(2000));
  }
  // Found in the store by a waiting rank: refused naming the key.
  ScopedStore t;
  ASSERT_TRUE(t.scoped->Set(base::NcclIdKey(0, 1), std::string(200, 'y')).ok());
  ThreadRun read = RunThreads(
      *t.scoped, 2, {1}, [](int r) { return Exchange(r, 2); }, MakeId(Blob(0)));
  EXPECT_EQ(read.status[1].code(), StatusCode::kInvalidArgument) << read.status[1].ToString();
  EXPECT_TRUE(Contains(read.status[1].message(), "'nccl/0/1/id' is 200 bytes"))
      << read.status[1].message();
  // A failing make_id: its error, with the others told.
  ScopedStore u;
  ThreadRun failed = RunThreads(
      *u.scoped, 2, AllRanks(2), [](int r) { return Exchange(r, 2, 1, 0, milliseconds(20000)); },
      [](std::string*) { return Unavailable("ncclGetUniqueId: no network interface"); });
  EXPECT_EQ(failed.status[0].code(), StatusCode::kUnavailable);
  EXPECT_EQ(failed.status[1].code(), StatusCode::kAborted);
  EXPECT_TRUE(Contains(failed.status[1].message(), "no network interface"))
      << failed.status[1].message();
}

TEST(NcclBootstrapTest, BadArgumentsAreRefused) {
  ScopedStore s;
  std::string id;
  NcclIdExchange x = Exchange(2, 2);
  EXPECT_EQ(ExchangeNcclId(*s.scoped, x, MakeId(Blob(0)), {}, &id).code(),
            StatusCode::kInvalidArgument);
  x = Exchange(0, 2);
  x.job_ranks = {1};
  EXPECT_EQ(ExchangeNcclId(*s.scoped, x, MakeId(Blob(0)), {}, &id).code(),
            StatusCode::kInvalidArgument);
}

TEST(NcclBootstrapTest, MissingRanksListsExactlyTheAbsentOnes) {
  ScopedStore s;
  // Ranks 0, 2 and 5 of 6 arrive (rank 0 publishes; 2 and 5 read the id).
  ThreadRun run = RunThreads(
      *s.scoped, 6, {0, 2, 5}, [](int r) { return Exchange(r, 6); }, MakeId(Blob(4)));
  for (int r : {0, 2, 5}) ASSERT_TRUE(run.status[r].ok()) << run.status[r].ToString();
  NcclIdExchange x = Exchange(0, 6);
  std::vector<int> missing;
  ASSERT_TRUE(MissingNcclRanks(*s.scoped, x, &missing).ok());
  EXPECT_EQ(missing, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(DescribeMissingRanks(missing, {}), "ranks 1, 3, 4 never arrived");
  EXPECT_EQ(DescribeMissingRanks({1, 3}, {4, 5, 6, 7}),
            "ranks 1, 3 (job ranks 5, 7) never arrived");
  EXPECT_EQ(DescribeMissingRanks({1, 3}, {0, 1, 2, 3}), "ranks 1, 3 never arrived");
  EXPECT_EQ(DescribeMissingRanks({}, {}), "every rank arrived");
  // Another generation's arrivals do not count.
  ASSERT_TRUE(MissingNcclRanks(*s.scoped, Exchange(0, 6, 2), &missing).ok());
  EXPECT_EQ(missing.size(), 6u);
}

TEST(NcclBootstrapTest, ProcessesOverAFileStore) {
  testing::RunOptions options;
  options.timeout = milliseconds(60000);
  testing::RunResult res = testing::RunRanks(
      4,
      [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<rendezvous::Store> base;
        HVD_RETURN_IF_ERROR(rendezvous::NewFileStore(dir, &base));
        auto store = rendezvous::NewPrefixStore(base::AttemptScope("j2", 1), base.get());
        NcclIdExchange x = Exchange(rank, size, 3, 1);
        std::string id;
        HVD_RETURN_IF_ERROR(ExchangeNcclId(*store, x, MakeId(Blob(42)), {}, &id));
        if (id != Blob(42)) return Internal("rank " + std::to_string(rank) + ": the id differs");
        return Status::OK();
      },
      options);
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd::runtime::gpu
