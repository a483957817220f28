// The single-copy allreduce's choices and failures: the probe that turns it on (on every rank or
// on none), ranks that disagree, a peer that goes away. Its results, at every count, dtype and op
// against the reference and bit for bit against the ring: collectives_test.cc ("shm_single").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "collectives/collectives.h"
#include "collectives_harness.h"
#include "testutil/cross_memory.h"
#include "testutil/multiproc.h"

namespace hvd::runtime::collectives {
namespace {

using hvd::testing::RunRanks;
using hvd::testing::RunResult;
using test::Config;
using test::Connect;
using test::MakeComm;
using test::Millis;
using transport::Link;
using transport::Transport;
using transport::WaitItem;

// A link of another transport that names another process as its peer.
class PidLink final : public Link {
 public:
  PidLink(Link* inner, int pid) : inner_(inner), pid_(pid) {}
  int peer() const override { return inner_->peer(); }
  const std::string& description() const override { return inner_->description(); }
  Status TrySend(const void* d, size_t n, size_t* m) override { return inner_->TrySend(d, n, m); }
  Status TryRecv(void* d, size_t n, size_t* m) override { return inner_->TryRecv(d, n, m); }
  int peer_pid() const override { return pid_; }
  Link* inner() const { return inner_; }

 private:
  Link* const inner_;
  const int pid_;
};

// `inner` with the link to `peer` replaced by one that reports `pid`.
class PidTransport final : public Transport {
 public:
  PidTransport(Transport* inner, int peer, int pid)
      : inner_(inner), peer_(peer), link_(inner->link(peer), pid) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Link* link(int p) override { return p == peer_ ? &link_ : inner_->link(p); }
  Status WaitReady(const std::vector<WaitItem>& items, transport::Clock::time_point d) override {
    std::vector<WaitItem> mapped = items;
    for (WaitItem& it : mapped) {
      if (it.link == &link_) it.link = link_.inner();
    }
    return inner_->WaitReady(mapped, d);
  }
  void Abort(const std::string& reason) override { inner_->Abort(reason); }

 private:
  Transport* const inner_;
  const int peer_;
  PidLink link_;
};

// A process id no process has (a child that has been reaped).
int GonePid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

// Sums `count` floats, rank + 1 each, and checks the result.
Status CheckSum(const Comm& comm, size_t count) {
  std::vector<float> v(count, static_cast<float>(comm.rank() + 1));
  HVD_RETURN_IF_ERROR(Allreduce(comm, v.data(), count, DataType::kFloat32, ReduceOp::kSum));
  const float want = comm.size() * (comm.size() + 1) / 2.0f;
  for (size_t i = 0; i < count; ++i) {
    if (v[i] != want) {
      return Internal("element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", not " +
                      std::to_string(want));
    }
  }
  return Status::OK();
}

// This rank's transport and communicator in `setup`, the single copy on as it asks.
Status Open(const Config& setup, int rank, const std::string& dir, Millis idle_timeout,
            std::unique_ptr<Transport>* t, Comm* comm) {
  HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, t));
  *comm = MakeComm(setup, t->get(), idle_timeout);
  return test::EnableSingleCopyAsAsked(setup, comm);
}

// OK when `text` holds every one of `wants`.
Status Says(const std::string& text, std::initializer_list<const char*> wants) {
  for (const char* want : wants) {
    if (text.find(want) == std::string::npos) {
      return Internal("\"" + std::string(want) + "\" is missing from: " + text);
    }
  }
  return Status::OK();
}

// OK when `s` failed with a message holding every one of `wants`.
Status FailedSaying(const Status& s, std::initializer_list<const char*> wants) {
  if (s.ok()) return Internal("it succeeded");
  return Says(s.message(), wants);
}

// Connects shared-memory ranks whose rank 1 sees rank 0 as process `pid`, probes the single copy
// (it must stay off on every rank) and hands the communicator and this rank's reason to `then`.
Status ProbeWithRank0As(int pid, int rank, int size, const std::string& dir,
                        const std::function<Status(const Comm&, const std::string&)>& then) {
  const Config setup{"shm", size, 1, true};
  std::unique_ptr<Transport> shm;
  HVD_RETURN_IF_ERROR(Connect(setup, rank, dir, &shm));
  PidTransport t(shm.get(), 0, pid);
  Comm comm = MakeComm(setup, rank == 1 ? static_cast<Transport*>(&t) : shm.get(), Millis(30000));
  std::string why;
  HVD_RETURN_IF_ERROR(EnableSingleCopy(&comm, 1, /*measure=*/false, &why));
  if (comm.single_copy_min_bytes != 0) return Internal("on, though rank 1 cannot read rank 0");
  return then(comm, why);
}

class SingleCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = hvd::testing::CrossMemoryUnavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// Rank 1 cannot read rank 0 (its link names a process that is gone): the probe leaves the single
// copy off on every rank, each saying who could not, and large allreduces still come out right.
TEST_F(SingleCopy, OffOnEveryRankWhenOneRankCannotRead) {
  const int gone = GonePid();
  RunResult res = RunRanks(3, [gone](int rank, int size, const std::string& dir) -> Status {
    return ProbeWithRank0As(
        gone, rank, size, dir, [rank](const Comm& comm, const std::string& why) {
          HVD_RETURN_IF_ERROR(rank == 1
                                  ? Says(why, {"from rank 0", "ESRCH"})
                                  : Says(why, {"rank 1 (", "could not read its peers' memory"}));
          return CheckSum(comm, 300001);  // the ring, as it would have been
        });
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A peer whose pid this process cannot see (0 from SO_PEERCRED: another pid namespace) is named
// as such, not as a peer off shared memory.
TEST_F(SingleCopy, APeerInAnotherPidNamespaceIsNamed) {
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    return ProbeWithRank0As(0, rank, size, dir, [rank](const Comm&, const std::string& why) {
      return rank == 1 ? Says(why, {"rank 0 (", "another pid namespace"}) : Says(why, {"rank 1 ("});
    });
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Over TCP there is no peer process to read: off, saying so.
TEST_F(SingleCopy, OffOverTcp) {
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"tcp", size};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(30000), &t, &comm));
    std::string why;
    HVD_RETURN_IF_ERROR(EnableSingleCopy(&comm, 1, /*measure=*/false, &why));
    if (comm.single_copy_min_bytes != 0) return Internal("on over TCP");
    if (why.find("is not reached through shared memory") == std::string::npos) {
      return Internal("the reason: " + why);
    }
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// Measured choice (single_copy_choice.h): every rank takes the same algorithm for every operation,
// two size classes are counted apart, each class runs the ring first, then the single copy, and
// the 64th operation probes the algorithm not chosen; results are right either way.
TEST_F(SingleCopy, MeasuredChoiceIsTheSameOnEveryRank) {
  RunResult res = RunRanks(3, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"shm", size, 1, true, 0};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(30000), &t, &comm));
    std::string why;
    HVD_RETURN_IF_ERROR(EnableSingleCopy(&comm, 64 << 10, /*measure=*/true, &why));
    if (comm.single_copy_choice == nullptr) return Internal("no measured choice: " + why);
    if (comm.Over(t.get()).single_copy_choice == comm.single_copy_choice) {
      return Internal("a view shares its communicator's counts");
    }
    constexpr int kOps = 65;  // per class: decisions after 2, 4, 8, 16, 32, 48, 64
    const size_t counts[2] = {(300 << 10) / 4, (2 << 20) / 4 + 1};
    std::vector<char> seq(2 * kOps);  // 's' single copy, 'r' ring; class-major
    for (int i = 0; i < kOps; ++i) {
      for (int k = 0; k < 2; ++k) {
        const std::string a = AllreduceAlgorithm(comm, counts[k] * 4);
        seq[k * kOps + i] = a == "single-copy" ? 's' : a == "ring" ? 'r' : '?';
        HVD_RETURN_IF_ERROR(CheckSum(comm, counts[k]));
      }
    }
    std::vector<char> all(seq.size() * size);
    HVD_RETURN_IF_ERROR(
        Allgather(comm, seq.data(), all.data(), std::vector<size_t>(size, seq.size())));
    for (int p = 0; p < size; ++p) {
      if (std::string(all.data() + p * seq.size(), seq.size()) !=
          std::string(seq.begin(), seq.end())) {
        return Internal("rank " + std::to_string(p) + " chose otherwise: " +
                        std::string(all.data() + p * seq.size(), seq.size()) + " against " +
                        std::string(seq.begin(), seq.end()));
      }
    }
    for (int k = 0; k < 2; ++k) {
      const char* s = seq.data() + k * kOps;
      if (s[0] != 'r' || s[1] != 's')
        return Internal("class " + std::to_string(k) + " began " + std::string(s, 2));
      if (s[63] == s[62] || s[63] == '?') {
        return Internal("class " + std::to_string(k) + ": no probe at 63: " + std::string(s, kOps));
      }
    }
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A rank that takes the single copy while its peer takes the ring is told so, naming the peer,
// instead of reading the ring's data as addresses.
TEST_F(SingleCopy, RanksThatDisagreeGetAnError) {
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"shm", size, 1, true, 0};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(5000), &t, &comm));
    if (rank == 0) comm.single_copy_min_bytes = 1;  // rank 1 keeps the ring
    std::vector<float> v(1 << 18, 1.0f);
    Status s = Allreduce(comm, v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    if (rank == 1) return Status::OK();  // its ring fails or not; rank 0's message matters
    return FailedSaying(s, {"rank 1", "disagree on the algorithm"});
  });
  // Rank 1 may be stopped once rank 0 has reported.
  ASSERT_EQ(res.ranks.size(), 2u);
  EXPECT_TRUE(res.ranks[0].ok()) << res.ranks[0].Describe();
}

// Both ranks take the single copy for the same bytes, but reduce differently: both say so.
TEST_F(SingleCopy, RanksThatReduceDifferentlyGetAnError) {
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"shm", size, 1, true, 0, 4096, 1};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(5000), &t, &comm));
    std::vector<float> v(1 << 16, 1.0f);
    Status s = Allreduce(comm, v.data(), v.size(), DataType::kFloat32,
                         rank == 0 ? ReduceOp::kSum : ReduceOp::kMax);
    return FailedSaying(s, {"float32 sum", "float32 max", "disagree"});
  });
  HVD_EXPECT_RANKS_OK(res);
}

// The first page of [vvar] (the vDSO's data): this process reads it, process_vm_readv cannot
// (EFAULT), as with a device driver's mapping. Null when there is none.
const uint8_t* KernelUnreadablePage() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("[vvar]") != std::string::npos) {
      return reinterpret_cast<const uint8_t*>(
          std::stoull(line.substr(0, line.find('-')), nullptr, 16));
    }
  }
  return nullptr;
}

// A rank whose input the kernel cannot read for its peers: every rank takes the ring instead, and
// the result is right (uint8 max against 0xff from the other rank: 0xff, whatever the page holds).
TEST_F(SingleCopy, MemoryTheKernelCannotReadTakesTheRing) {
  if (KernelUnreadablePage() == nullptr) GTEST_SKIP() << "no [vvar] mapping in this process";
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"shm", size, 1, true, 0, 4096, 1};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(30000), &t, &comm));
    std::vector<uint8_t> mine(4096, 0xff), out(4096, 0);
    const uint8_t* in = rank == 0 ? KernelUnreadablePage() : mine.data();
    HVD_RETURN_IF_ERROR(AllreduceParts(comm, in, out.data(), AllreduceLayout(comm, out.size()),
                                       DataType::kUInt8, ReduceOp::kMax));
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] != 0xff)
        return Internal("byte " + std::to_string(i) + " is " + std::to_string(out[i]));
    }
    return Status::OK();
  });
  HVD_EXPECT_RANKS_OK(res);
}

// A peer that says hello and exits: the rank reading it fails within its idle timeout, naming it.
TEST_F(SingleCopy, APeerThatLeavesIsNamed) {
  RunResult res = RunRanks(2, [](int rank, int size, const std::string& dir) -> Status {
    const Config setup{"shm", size, 1, true, 0, 4096, 1};
    std::unique_ptr<Transport> t;
    Comm comm;
    HVD_RETURN_IF_ERROR(Open(setup, rank, dir, Millis(5000), &t, &comm));
    std::vector<float> v(1 << 18, 1.0f);
    if (rank == 1) {
      // The hello of the same allreduce (the wire format of single_copy_allreduce.cc), and gone.
      const uint64_t hello[6] = {
          0x32437053'64766800,
          v.size() * sizeof(float),
          static_cast<uint64_t>(DataType::kFloat32) << 8 | static_cast<uint64_t>(ReduceOp::kSum),
          1,
          reinterpret_cast<uintptr_t>(v.data()),
          reinterpret_cast<uintptr_t>(v.data())};
      return transport::Send(*t, 0, hello, sizeof(hello), Millis(5000));
    }
    Status s = Allreduce(comm, v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    return FailedSaying(s, {"rank 1"});
  });
  HVD_EXPECT_RANKS_OK(res);
}

}  // namespace
}  // namespace hvd::runtime::collectives
