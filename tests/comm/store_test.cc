// Rendezvous stores: the contract every Store keeps (run against memory, file and prefix stores),
// then what is specific to each: the file store across processes, prefix isolation, OpenStore.
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "rendezvous/store.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::rendezvous {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A fresh directory under $TMPDIR, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hvd-store-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class Kind { kMemory, kFile, kPrefix };

class StoreContractTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::kMemory:
        store_ = NewMemoryStore();
        break;
      case Kind::kFile:
        ASSERT_TRUE(NewFileStore(dir_.path() + "/s", &store_).ok());
        break;
      case Kind::kPrefix:
        base_ = NewMemoryStore();
        store_ = NewPrefixStore("job/attempt0", base_.get());
        break;
    }
  }
  TempDir dir_;
  std::unique_ptr<Store> base_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreContractTest, SetGetOverwrite) {
  std::string v;
  ASSERT_TRUE(store_->Set("k", "one").ok());
  ASSERT_TRUE(store_->Get("k", &v).ok());
  EXPECT_EQ(v, "one");
  ASSERT_TRUE(store_->Set("k", "two, longer").ok());
  ASSERT_TRUE(store_->Get("k", &v).ok());
  EXPECT_EQ(v, "two, longer");
  ASSERT_TRUE(store_->Set("k", "").ok());
  ASSERT_TRUE(store_->Get("k", &v).ok());
  EXPECT_EQ(v, "");
}

TEST_P(StoreContractTest, BinaryValue) {
  const std::string value("a\0b\xff\n", 5);
  std::string v;
  ASSERT_TRUE(store_->Set("bin", value).ok());
  ASSERT_TRUE(store_->Get("bin", &v).ok());
  EXPECT_EQ(v, value);
}

TEST_P(StoreContractTest, GetMissingIsNotFound) {
  std::string v = "untouched";
  Status s = store_->Get("absent", &v);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("absent"), std::string::npos) << s.message();
  EXPECT_EQ(v, "untouched");
}

TEST_P(StoreContractTest, OddKeysAreDistinct) {
  // Keys a file store must not confuse with paths, with each other or with its own files.
  const std::vector<std::string> keys = {"a/b:c d",
                                         "a%2Fb%3Ac%20d",
                                         "a_b_c_d",
                                         ".",
                                         "..",
                                         "/",
                                         "k_x",
                                         "l_x",
                                         "%",
                                         std::string(600, 'z'),
                                         std::string(599, 'z') + "y"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store_->Set(keys[i], "v" + std::to_string(i)).ok()) << keys[i];
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string v;
    ASSERT_TRUE(store_->Get(keys[i], &v).ok()) << keys[i];
    EXPECT_EQ(v, "v" + std::to_string(i)) << keys[i];
  }
}

TEST_P(StoreContractTest, WaitReturnsOnceAllKeysAreSet) {
  ASSERT_TRUE(store_->Set("first", "1").ok());
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(store_->Set("second", "2").ok());
  });
  auto start = Clock::now();
  Status s = store_->Wait({"first", "second"}, milliseconds(5000));
  setter.join();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(2000));
}

TEST_P(StoreContractTest, WaitTimeoutListsMissingKeys) {
  ASSERT_TRUE(store_->Set("here", "1").ok());
  auto start = Clock::now();
  Status s = store_->Wait({"here", "gone/1", "gone/2"}, milliseconds(100));
  EXPECT_GE(Clock::now() - start, milliseconds(100));
  ASSERT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("gone/1'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("gone/2'"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("here'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(GetParam() == Kind::kFile ? "file store /" : "memory store"),
            std::string::npos)
      << s.message();
}

TEST_P(StoreContractTest, WaitOnNothingSucceeds) {
  EXPECT_TRUE(store_->Wait({}, milliseconds(0)).ok());
}

TEST_P(StoreContractTest, AddCounts) {
  int64_t v = 0;
  ASSERT_TRUE(store_->Add("c", 5, &v).ok());
  EXPECT_EQ(v, 5);
  ASSERT_TRUE(store_->Add("c", -7, &v).ok());
  EXPECT_EQ(v, -2);
  std::string text;
  ASSERT_TRUE(store_->Get("c", &text).ok());
  EXPECT_EQ(text, "-2");
  ASSERT_TRUE(store_->Set("c", "40").ok());
  ASSERT_TRUE(store_->Add("c", 2, &v).ok());
  EXPECT_EQ(v, 42);
}

TEST_P(StoreContractTest, AddOnNonIntegerIsInvalidArgument) {
  for (const char* bad : {"abc", "12x", " 3", "+4", "", "99999999999999999999"}) {
    ASSERT_TRUE(store_->Set("c", bad).ok());
    int64_t v = 0;
    Status s = store_->Add("c", 1, &v);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << bad << "': " << s.ToString();
    EXPECT_NE(s.message().find("c' whose value '" + std::string(bad) + "'"), std::string::npos)
        << s.message();
  }
  ASSERT_TRUE(store_->Set("big", std::to_string(INT64_MAX)).ok());
  EXPECT_EQ(store_->Add("big", 1, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, AddFromThreadsIsExact) {
  constexpr int kThreads = 6, kAdds = 100;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i) {
        int64_t v = 0;
        if (!store_->Add("counter", 1, &v).ok()) return;
        seen[t].push_back(v);
      }
    });
  }
  for (auto& th : threads) th.join();
  // Every intermediate value is handed out exactly once.
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  std::string text;
  ASSERT_TRUE(store_->Get("counter", &text).ok());
  EXPECT_EQ(text, std::to_string(kThreads * kAdds));
}

INSTANTIATE_TEST_SUITE_P(Kinds, StoreContractTest,
                         ::testing::Values(Kind::kMemory, Kind::kFile, Kind::kPrefix),
                         [](const auto& info) {
                           switch (info.param) {
                             case Kind::kMemory:
                               return std::string("Memory");
                             case Kind::kFile:
                               return std::string("File");
                             case Kind::kPrefix:
                               return std::string("Prefix");
                           }
                           return std::string("Unknown");
                         });

TEST(FileStoreTest, AddFromForkedProcessesIsExact) {
  constexpr int kProcs = 4, kAdds = 150;
  hvd::testing::RunResult res =
      hvd::testing::RunRanks(kProcs, [](int rank, int size, const std::string& dir) -> Status {
        std::unique_ptr<Store> s;  // each process opens its own store, as ranks do
        HVD_RETURN_IF_ERROR(NewFileStore(dir, &s));
        for (int i = 0; i < kAdds; ++i) HVD_RETURN_IF_ERROR(s->Add("shared/counter", 1, nullptr));
        HVD_RETURN_IF_ERROR(s->Set("done/" + std::to_string(rank), "1"));
        std::vector<std::string> done;
        for (int r = 0; r < size; ++r) done.push_back("done/" + std::to_string(r));
        HVD_RETURN_IF_ERROR(s->Wait(done, milliseconds(30000)));
        std::string v;
        HVD_RETURN_IF_ERROR(s->Get("shared/counter", &v));
        if (v != std::to_string(kProcs * kAdds)) return Internal("counter is " + v);
        return Status::OK();
      });
  HVD_EXPECT_RANKS_OK(res);
}

TEST(FileStoreTest, SharedBetweenInstancesAndFlat) {
  TempDir dir;
  std::unique_ptr<Store> a, b;
  ASSERT_TRUE(NewFileStore(dir.path() + "/x/y/z/", &a).ok());  // mkdir -p, trailing slash
  ASSERT_TRUE(NewFileStore(dir.path() + "/x/y/z", &b).ok());
  EXPECT_EQ(a->Describe(), "file store " + dir.path() + "/x/y/z");
  ASSERT_TRUE(a->Set("scope/tcp/0", "127.0.0.1:1").ok());
  std::string v;
  ASSERT_TRUE(b->Get("scope/tcp/0", &v).ok());
  EXPECT_EQ(v, "127.0.0.1:1");
  // A key with '/' is one file, not a directory tree; no temp files are left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/x/y/z")) {
    EXPECT_TRUE(e.is_regular_file()) << e.path();
    EXPECT_NE(e.path().filename().string().rfind(".t_", 0), 0u) << e.path();
  }
}

TEST(FileStoreTest, BadDirectoriesAreErrorsNamingThePath) {
  TempDir dir;
  std::string file = dir.path() + "/plain-file";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  std::unique_ptr<Store> s;
  Status st = NewFileStore(file, &s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(file), std::string::npos) << st.message();
  st = NewFileStore(file + "/sub", &s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(file), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ENOTDIR"), std::string::npos) << st.message();
  EXPECT_EQ(NewFileStore("relative/dir", &s).code(), StatusCode::kInvalidArgument);
}

TEST(PrefixStoreTest, PrefixesIsolateKeys) {
  auto base = NewMemoryStore();
  auto job1 = NewPrefixStore("job1", base.get());
  auto job2 = NewPrefixStore("job2", base.get());
  ASSERT_TRUE(job1->Set("k", "one").ok());
  ASSERT_TRUE(job2->Set("k", "two").ok());
  std::string v;
  ASSERT_TRUE(job1->Get("k", &v).ok());
  EXPECT_EQ(v, "one");
  ASSERT_TRUE(job2->Get("k", &v).ok());
  EXPECT_EQ(v, "two");
  ASSERT_TRUE(base->Get("job1/k", &v).ok());
  EXPECT_EQ(v, "one");
  EXPECT_EQ(base->Get("k", &v).code(), StatusCode::kNotFound);
  ASSERT_TRUE(job1->Set("only1", "x").ok());
  EXPECT_EQ(job2->Get("only1", &v).code(), StatusCode::kNotFound);
  int64_t n = 0;
  ASSERT_TRUE(job1->Add("n", 3, &n).ok());
  ASSERT_TRUE(job2->Add("n", 1, &n).ok());
  EXPECT_EQ(n, 1);
  Status s = job2->Wait({"only1"}, milliseconds(20));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("job2/only1"), std::string::npos) << s.message();
  EXPECT_NE(job1->Describe().find("job1"), std::string::npos) << job1->Describe();
}

TEST(OpenStoreTest, FileUrlsAndPlainPaths) {
  TempDir dir;
  std::unique_ptr<Store> by_url, by_path;
  ASSERT_TRUE(OpenStore("file://" + dir.path() + "/rdzv", &by_url).ok());
  ASSERT_TRUE(OpenStore(dir.path() + "/rdzv", &by_path).ok());
  ASSERT_TRUE(by_url->Set("k", "v").ok());
  std::string v;
  ASSERT_TRUE(by_path->Get("k", &v).ok());
  EXPECT_EQ(v, "v");
}

TEST(OpenStoreTest, BadUrlsAreInvalidArgument) {
  for (const std::string url :
       {"grpc://127.0.0.1:5000", "redis://x", "relative/dir", "file://relative", "file://", ""}) {
    std::unique_ptr<Store> s;
    Status st = OpenStore(url, &s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << url << ": " << st.ToString();
    EXPECT_NE(st.message().find("'" + url + "'"), std::string::npos) << st.message();
    EXPECT_EQ(s, nullptr);
  }
  std::unique_ptr<Store> s;
  Status st = OpenStore("grpc://127.0.0.1:5000", &s);
  EXPECT_NE(st.message().find("file://"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace hvd::runtime::rendezvous
