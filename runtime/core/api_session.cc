// The session: Init() and Shutdown(), the context they make and drop (internal::Current()), and
// what is read from it without an operation (topology, elastic generation, engine statistics).
// A process forked from one with a session (a DataLoader worker, os.fork()) never shuts the
// parent's session down: at its exit, or its own Shutdown(), the copy is dropped untouched.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/logging.h"
#include "base/mutex.h"
#include "core/api_internal.h"
#include "core/context.h"
#include "core/elastic.h"
#include "core/engine_stats.h"
#include "hvd/hvd.h"
#include "stall/native_stacks.h"

namespace hvd {
namespace {

using runtime::core::Context;

base::Mutex g_mu;
std::shared_ptr<Context> g_ctx HVD_GUARDED_BY(g_mu);
bool g_atexit_registered = false;
// The process whose Init made g_ctx. Not guarded by g_mu: a forked child reads it, and there g_mu
// may be held by a thread of the parent's that was not copied.
std::atomic<pid_t> g_init_pid{0};
// This process's pid. getpid() is a system call (glibc stopped caching it), too dear for a check
// made twice per operation (7% of a 4 KiB allreduce's samples on two ranks): it is read once, and
// again in every child fork() makes (pthread_atfork's child handler runs there before fork()
// returns). A child of vfork() or posix_spawn() execs before it could call hvd.
std::atomic<pid_t> g_self_pid{0};
std::atomic<bool> g_atfork_registered{false};
void NoteSelfPid() {
  g_self_pid.store(getpid(), std::memory_order_relaxed);
}
// Whether the last session was shut down (a call now says so, not "not initialized").
std::atomic<bool> g_shut_down{false};

// In a forked child, the session is the parent's: its threads were not copied, so its locks and
// condition variables may be held by threads that are not here (destroying it hung in the stall
// reporter's), and its connections and shared-memory segments are the parent's (closing them
// failed the parent's next collective: "rank 1 closed the connection"). It is dropped without
// being destroyed; the child's exit frees its memory. REQUIRES: InForkedChild(). g_mu is not
// taken: a thread of the parent's may have held it at the fork, and none is here to release it.
void AbandonInForkedChild() HVD_NO_THREAD_SAFETY_ANALYSIS {
  static_cast<void>(new std::shared_ptr<Context>(std::move(g_ctx)));  // never destroyed
  g_init_pid.store(0);
}

}  // namespace

namespace internal {

bool InForkedChild() {
  const pid_t pid = g_init_pid.load();
  if (pid == 0) return false;
  // Where the handler could not be registered, ask the kernel each time.
  return pid !=
         (g_atfork_registered.load() ? g_self_pid.load(std::memory_order_relaxed) : getpid());
}

Status ForkedChildError(const char* what) {
  return FailedPrecondition(std::string(what) + ": this process was forked from a rank (pid " +
                            std::to_string(g_init_pid.load()) +
                            ") after hvd::Init(); the session is that rank's, and using it here "
                            "would mix this process's traffic into its connections. Use hvd in "
                            "the rank itself (a forked child may read Rank(), Size() and the "
                            "rest), or call hvd::Shutdown() here and start a job of its own");
}

// Blocking calls made on the background thread (from a callback) would wait for that very
// thread: fail them before anything is submitted (a submitted synchronous operation would
// outlive the call and write into the caller's memory later).
Status NotFromCallback(const char* fn) {
  if (!internal::OnBackgroundThread()) return Status::OK();
  return FailedPrecondition(std::string(fn) +
                            "() called from an hvd callback (the background thread), where it "
                            "would wait for ever; callbacks must not block");
}

std::shared_ptr<Context> Current() {
  base::MutexLock lock(&g_mu);
  return g_ctx;
}

std::string NotInitialized() {
  // (hvd.torch says hvd.init() and hvd.shutdown() where these say hvd::Init() and Shutdown())
  return g_shut_down.load() ? "hvd was shut down (hvd::Shutdown()); call hvd::Init() again first"
                            : "hvd is not initialized; call hvd::Init() first";
}

}  // namespace internal

using internal::Current;
using internal::InForkedChild;
using internal::NotFromCallback;

namespace {

// Where a stalled C++ rank is: the launcher's stack request gets this process's native stack
// (stall/native_stacks.h). What became of it is said once, where it did not take effect.
void InstallStackDump(int rank) {
  std::string detail;
  switch (runtime::stall::InstallNativeStackDump(rank, &detail)) {
    case runtime::stall::NativeStacks::kHandled:
      HVD_LOG(INFO) << "HVD_STACK_DUMP_SIGNAL: the program handles that signal already; a "
                       "stall's request for this rank's stacks goes to its handler";
      break;
    case runtime::stall::NativeStacks::kUnavailable:
      HVD_LOG(WARNING) << "HVD_STACK_DUMP_SIGNAL: " << detail
                       << "; a stall will not show this rank's stack";
      break;
    default:
      break;
  }
}

}  // namespace

Status Init() {
  return Init(InitOptions{});
}

Status Init(const InitOptions& options) {
  base::MutexLock lock(&g_mu);
  // Horovod's hvd.init() may be called again and again; only the first does anything.
  if (g_ctx) return Status::OK();
  std::unique_ptr<Context> ctx;
  HVD_RETURN_IF_ERROR_CTX(Context::Create(options, &ctx), "hvd::Init");
  g_ctx = std::move(ctx);
  if (!g_atfork_registered.load()) {
    g_atfork_registered.store(pthread_atfork(nullptr, nullptr, NoteSelfPid) == 0);
  }
  NoteSelfPid();
  g_init_pid.store(g_self_pid.load(std::memory_order_relaxed));
  InstallStackDump(g_ctx->topology().rank);
  g_shut_down.store(false);
  // A new session numbers unnamed operations from 0 on every rank, whatever the last one did.
  internal::ResetUnnamedNames();
  if (!g_atexit_registered) {
    // A process that returns from main() without Shutdown() must not leave a thread running
    // into static destruction.
    std::atexit([] { Shutdown(); });
    g_atexit_registered = true;
  }
  return Status::OK();
}

Status Shutdown() {
  // The background thread cannot wait for itself to stop (std::thread::join would throw and
  // terminate the process).
  HVD_RETURN_IF_ERROR(NotFromCallback("hvd::Shutdown"));
  // The kernel's pid, not the cached one: a child made without fork() (clone, _Fork) ran no
  // atfork handler, and tearing the session down there would close the parent's connections.
  const pid_t init_pid = g_init_pid.load();
  if (InForkedChild() || (init_pid != 0 && init_pid != getpid())) {
    AbandonInForkedChild();
    return Status::OK();
  }
  std::shared_ptr<Context> ctx;
  {
    base::MutexLock lock(&g_mu);
    ctx = std::move(g_ctx);
    if (ctx) g_shut_down.store(true);  // with g_ctx gone: no call in between says otherwise
  }
  if (!ctx) return Status::OK();
  return ctx->Shutdown();
}

bool IsInitialized() {
  return Current() != nullptr;
}

bool IsElastic() {
  runtime::core::ElasticSettings e;
  return runtime::core::ReadElasticSettings(&e).ok() && e.enabled;
}

Status ElasticGeneration(ElasticGenerationInfo* info) {
  auto ctx = Current();
  if (!ctx) return FailedPrecondition(internal::NotInitialized());
  return ctx->ElasticGeneration(&info->joined, &info->latest, &info->only_removed);
}

Status ElasticCommitted() {
  auto ctx = Current();
  if (!ctx) return FailedPrecondition(internal::NotInitialized());
  return ctx->ElasticCommitted();
}

bool IsHomogeneous() {
  auto ctx = Current();
  return ctx != nullptr && ctx->topology().homogeneous;
}

#define HVD_TOPOLOGY_GETTER(Fn, field)       \
  int Fn() {                                 \
    auto ctx = Current();                    \
    return ctx ? ctx->topology().field : -1; \
  }
HVD_TOPOLOGY_GETTER(Rank, rank)
HVD_TOPOLOGY_GETTER(Size, size)
HVD_TOPOLOGY_GETTER(LocalRank, local_rank)
HVD_TOPOLOGY_GETTER(LocalSize, local_size)
HVD_TOPOLOGY_GETTER(CrossRank, cross_rank)
HVD_TOPOLOGY_GETTER(CrossSize, cross_size)
#undef HVD_TOPOLOGY_GETTER

}  // namespace hvd

namespace hvd::runtime::core {
EngineStats CurrentEngineStats() {
  auto ctx = Current();
  return ctx ? ctx->engine().stats() : EngineStats{};
}
}  // namespace hvd::runtime::core
