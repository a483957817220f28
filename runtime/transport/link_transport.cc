// LinkTransport: per-peer links of any kind plus WaitReady (spin, then poll(2) over what the links
// arm and the abort eventfd) and Abort. See link_transport.h for the vocabulary.
#include "transport/link_transport.h"

#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

#include "transport/fd_util.h"
#include "transport/move_off_cpu.h"

namespace hvd::runtime::transport {

AbortState::AbortState() : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

AbortState::~AbortState() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status AbortState::status() const {
  base::MutexLock lock(&mu_);
  return Aborted(reason_);
}

bool AbortState::Abort(const std::string& reason) {
  {
    base::MutexLock lock(&mu_);
    if (aborted_.load(std::memory_order_relaxed)) return false;
    reason_ = reason.empty() ? "transport aborted" : reason;
    aborted_.store(true, std::memory_order_release);
  }
  // Never read back: the counter stays nonzero, so every later poll returns at once too.
  uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof(one));
  return true;
}

namespace {
thread_local bool t_patient = false;
thread_local int t_spin_ranks = 0;
}  // namespace

ScopedSpinRanks::ScopedSpinRanks(int n) : previous_(t_spin_ranks) {
  if (n > 0) t_spin_ranks = n;
}
ScopedSpinRanks::~ScopedSpinRanks() {
  t_spin_ranks = previous_;
}

ScopedPatientWaits::ScopedPatientWaits(bool patient) : previous_(t_patient) {
  t_patient = t_patient || patient;
}
ScopedPatientWaits::~ScopedPatientWaits() {
  t_patient = previous_;
}
bool ScopedPatientWaits::Active() {
  return t_patient;
}

namespace {

constexpr auto kMaxPause = std::chrono::microseconds(10);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class LinkTransport final : public Transport {
 public:
  LinkTransport(int rank, int size, std::vector<std::unique_ptr<PollableLink>> links,
                std::shared_ptr<AbortState> abort, SpinPolicy spin)
      : rank_(rank), size_(size), links_(std::move(links)), abort_(std::move(abort)), spin_(spin) {
    links_.resize(size);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Link* link(int peer) override { return links_[peer].get(); }

  Status WaitReady(const std::vector<WaitItem>& items, Clock::time_point deadline) override {
    if (abort_->aborted()) return abort_->status();
    bool spinnable = false;
    for (const WaitItem& it : items) spinnable |= it.link != nullptr && Of(it)->CanSpin();
    if (spinnable && spin_.spin.count() > 0 && !t_patient) {
      // Ready already (a peer ahead of this rank): no clock read, which costs as much as a
      // small message's wait otherwise would.
      if (AnyReadyNow(items)) return Status::OK();
      const Clock::time_point now = Clock::now();
      const bool ready = Spin(items, now, std::min(deadline, now + spin_.spin));
      // Where this thread goes on from here: a yield, a move or a sleep may have moved it.
      NoteCpu(items, sched_getcpu());
      if (ready) return abort_->aborted() ? abort_->status() : Status::OK();
      Status s = Sleep(items, deadline);
      NoteCpu(items, sched_getcpu());
      return s;
    }
    return Sleep(items, deadline);
  }

  void Abort(const std::string& reason) override {
    if (!abort_->Abort(reason)) return;
    for (auto& l : links_) {
      if (l != nullptr) l->Shutdown();
    }
  }

 private:
  static PollableLink* Of(const WaitItem& it) { return static_cast<PollableLink*>(it.link); }

  static bool AnyReadyNow(const std::vector<WaitItem>& items) {
    for (const WaitItem& it : items) {
      if (it.link != nullptr && Of(it)->ReadyNow(it.send, it.recv)) return true;
    }
    return false;
  }

  // Whether to yield from now on: a waited peer last published `*cpu`, this thread's CPU, so it
  // cannot answer before this thread gives the CPU up. Called only under the pause policy (every
  // rank of the host could have a CPU of its own): then the higher rank of such a pair (so only
  // one of them moves) moves to an allowed CPU no local peer published (move_off_cpu.h) and goes
  // on pausing there.
  bool SharingCpu(const std::vector<WaitItem>& items, int* cpu) {
    if (*cpu < 0) return false;  // sched_getcpu failed: never a match
    bool sharing = false, higher_peer = false;
    for (const WaitItem& it : items) {
      if (it.link == nullptr || Of(it)->PeerCpu() != *cpu) continue;
      sharing = true;
      higher_peer |= it.link->peer() > rank_;
    }
    if (!sharing) return false;
    if (higher_peer) return true;  // that peer moves
    cpu_set_t taken;
    CPU_ZERO(&taken);
    for (const auto& l : links_) {
      const int c = l != nullptr ? l->PeerCpu() : -1;
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &taken);
    }
    if (!MoveOffCpu(*cpu, taken)) return true;
    *cpu = sched_getcpu();
    NoteCpu(items, *cpu);
    return false;
  }

  static void NoteCpu(const std::vector<WaitItem>& items, int cpu) {
    if (cpu < 0) return;
    for (const WaitItem& it : items) {
      if (it.link != nullptr) Of(it)->NoteCpu(cpu);
    }
  }

  // True as soon as an item is ready now or the transport is aborted; false at `until`.
  // Links that cannot be ready now (TCP) are left to Sleep's poll. `now`: the clock at the call.
  bool Spin(const std::vector<WaitItem>& items, Clock::time_point now, Clock::time_point until) {
    auto pause = spin_.pause;
    if (t_spin_ranks > 0) {  // a process set's wait (ScopedSpinRanks): as SpinFor would choose
      pause = static_cast<size_t>(t_spin_ranks) <= spin_.cpus
                  ? std::min(spin_.spin, std::chrono::microseconds(kMaxPause))
                  : std::chrono::microseconds(0);
    }
    const Clock::time_point yield_from = std::min(until, now + pause);
    int cpu = sched_getcpu();  // a load from the rseq area with glibc >= 2.35
    NoteCpu(items, cpu);
    bool yielding = pause.count() == 0 || SharingCpu(items, &cpu);
    for (unsigned i = 0;; ++i) {
      if (AnyReadyNow(items) || abort_->aborted()) return true;
      if (!yielding) {
        CpuRelax();
        if ((i & 15) != 15) continue;  // read the clock every 16 polls
        now = Clock::now();
        if (now >= until) return false;
        yielding = now >= yield_from || SharingCpu(items, &cpu);
        continue;
      }
      if (Clock::now() >= until) return false;
      sched_yield();
    }
  }

  Status Sleep(const std::vector<WaitItem>& items, Clock::time_point deadline) {
    std::vector<pollfd> fds;
    std::vector<size_t> first(items.size());
    for (;;) {
      fds.clear();
      for (size_t i = 0; i < items.size(); ++i) {
        first[i] = fds.size();
        if (items[i].link != nullptr) Of(items[i])->Arm(items[i].send, items[i].recv, &fds);
      }
      fds.push_back({abort_->wake_fd(), POLLIN, 0});
      // Armed first, checked second: a peer that moved an index after our last check either
      // is seen here or saw our flag and rang the doorbell.
      bool ready = AnyReadyNow(items);
      int r = 0;
      if (!ready) {
        auto now = Clock::now();
        auto left = deadline > now
                        ? std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count()
                        : 0;
        r = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, INT_MAX)));
      }
      const int err = errno;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].link != nullptr) {
          Of(items[i])->Disarm(items[i].send, items[i].recv, fds.data() + first[i]);
        }
      }
      if (abort_->aborted()) return abort_->status();
      if (ready || r > 0) return Status::OK();
      if (r < 0 && err != EINTR) return Internal("WaitReady: poll: " + ErrnoText(err));
      if (r == 0 && Clock::now() >= deadline) return TimedOut(items);
    }
  }

  static Status TimedOut(const std::vector<WaitItem>& items) {
    std::string m = "WaitReady: deadline passed waiting on";
    const char* sep = " ";
    for (const WaitItem& it : items) {
      if (it.link == nullptr) continue;
      m += sep;
      m += it.send && it.recv ? "send/recv " : it.send ? "send to " : "recv from ";
      m += it.link->description();
      sep = ", ";
    }
    if (*sep == ' ') m += " nothing";
    return DeadlineExceeded(std::move(m));
  }

  const int rank_;
  const int size_;
  std::vector<std::unique_ptr<PollableLink>> links_;
  const std::shared_ptr<AbortState> abort_;
  const SpinPolicy spin_;
};

}  // namespace

SpinPolicy SpinFor(size_t local_ranks, std::chrono::microseconds spin) {
  cpu_set_t set;
  const size_t cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  SpinPolicy p;
  p.spin = local_ranks > 1 ? spin : std::chrono::microseconds(0);
  p.cpus = cpus;
  p.pause = local_ranks <= cpus ? std::min(p.spin, std::chrono::microseconds(kMaxPause))
                                : std::chrono::microseconds(0);
  return p;
}

std::unique_ptr<Transport> NewLinkTransport(int rank, int size,
                                            std::vector<std::unique_ptr<PollableLink>> links,
                                            std::shared_ptr<AbortState> abort, SpinPolicy spin) {
  return std::make_unique<LinkTransport>(rank, size, std::move(links), std::move(abort), spin);
}

}  // namespace hvd::runtime::transport
