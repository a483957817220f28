#include "core/operation.h"

#include <exception>

#include "base/logging.h"
#include "core/api_internal.h"

namespace hvd {
namespace internal {

namespace {
thread_local bool t_background = false;
}  // namespace

void MarkBackgroundThread() {
  t_background = true;
}
bool OnBackgroundThread() {
  return t_background;
}

ScopedBackgroundThread::ScopedBackgroundThread() : was_(t_background) {
  t_background = true;
}
ScopedBackgroundThread::~ScopedBackgroundThread() {
  t_background = was_;
}

Operation::~Operation() {
  ReleaseDevice();
}

void Operation::ReleaseDevice() {
  for (const ReadyEvent& r : ready) {
    if (r.event != nullptr) r.device->ReleaseReady(r.event);
  }
  for (const Result& r : results) {
    if (r.device_data != nullptr) r.device->Free(r.device_data, r.free_stream);
  }
}

void Operation::Complete(const Status& status) {
  {
    base::MutexLock lock(&mu_);
    if (done_.load(std::memory_order_relaxed) || completing_) return;
    completing_ = true;
    status_ = status;
    if (!callback) {  // nothing runs in between: done at once (one lock instead of two)
      done_.store(true, std::memory_order_release);
      lock.Unlock();
      cv_.NotifyAll();
      return;
    }
  }
  // The callback runs before the operation is marked done, so that Ready() or a Wait() returning
  // implies the callback ran (marking it done first let a Wait() that started late return while
  // the callback was still running). An exception would unwind the round that completes it (on
  // the background thread: std::terminate); it is the caller's bug, said and dropped.
  try {
    callback(status);
  } catch (const std::exception& e) {
    HVD_LOG(ERROR) << "the callback of '" << request.key << "' threw (" << e.what()
                   << "); ignored: callbacks must not throw";
  } catch (...) {
    HVD_LOG(ERROR) << "the callback of '" << request.key
                   << "' threw something not derived from std::exception; ignored: callbacks "
                      "must not throw";
  }
  {
    base::MutexLock lock(&mu_);
    done_.store(true, std::memory_order_release);
  }
  cv_.NotifyAll();
}

bool Operation::done() const {
  return done_.load(std::memory_order_acquire);
}

// Waiting on the background thread (from a callback) for an operation it has not completed yet
// would wait for ever: only that thread can complete it.
Status Operation::BackgroundWaitError() const {
  return FailedPrecondition("waiting for '" + request.key +
                            "' from an hvd callback (the background thread) would never return: "
                            "callbacks must not block on operations");
}

Status Operation::Wait() const {
  if (done_.load(std::memory_order_acquire)) return FinalStatus();  // (the caller ran it)
  base::MutexLock lock(&mu_);
  if (OnBackgroundThread() && !done_.load(std::memory_order_relaxed)) {
    return completing_ ? status_ : BackgroundWaitError();
  }
  cv_.Wait(lock, [&]() HVD_REQUIRES(mu_) { return done_.load(std::memory_order_relaxed); });
  return status_;
}

bool Operation::WaitFor(std::chrono::milliseconds timeout) const {
  base::MutexLock lock(&mu_);
  if (OnBackgroundThread() && !done_.load(std::memory_order_relaxed)) return completing_;
  return cv_.WaitFor(lock, timeout,
                     [&]() HVD_REQUIRES(mu_) { return done_.load(std::memory_order_relaxed); });
}

// status_ is written before done_ is set (release) and never after: once done() is seen, it
// can be read without the lock.
Status Operation::FinalStatus() const {
  return status_;
}

Status Operation::status() const {
  base::MutexLock lock(&mu_);
  return status_;
}

std::shared_ptr<Operation> Operation::Failed(const Status& status) {
  auto op = std::make_shared<Operation>();
  op->Complete(status);
  return op;
}

namespace {

// Set when this thread's pool is destroyed (thread exit): operations released later are deleted.
// A bool needs no destructor, so it stays readable to the end.
thread_local bool t_pool_gone = false;

struct Pool {
  Pool() { free.reserve(Operation::kPooledPerThread); }
  ~Pool() { t_pool_gone = true; }  // before `free` goes: what its operations release is deleted
  std::vector<std::unique_ptr<Operation>> free;
};

Pool* ThisThreadPool() {
  if (t_pool_gone) return nullptr;
  thread_local Pool pool;
  return &pool;
}

}  // namespace

std::shared_ptr<Operation> Operation::Reused() {
  Pool* pool = ThisThreadPool();
  Operation* op;
  if (pool != nullptr && !pool->free.empty()) {
    op = pool->free.back().release();
    pool->free.pop_back();
  } else {
    op = new Operation();
  }
  return std::shared_ptr<Operation>(op, Recycle{});
}

void Operation::Recycle::operator()(Operation* op) const {
  op->Reset();  // first: a callback's captures may release other operations into the pool
  Pool* pool = ThisThreadPool();
  if (pool == nullptr || pool->free.size() >= Operation::kPooledPerThread) {
    delete op;
    return;
  }
  pool->free.emplace_back(op);  // within the reserved capacity: no allocation, cannot throw
}

// No other thread can reach the operation: its last reference is gone.
void Operation::Reset() {
  ReleaseDevice();
  ready.clear();
  results.clear();
  callback = nullptr;
  last_joined_rank = -1;
  result_id = -1;
  engine = nullptr;
  std::string key = std::move(request.key);
  std::vector<runtime::negotiation::TensorSpec> tensors = std::move(request.tensors);
  request = runtime::negotiation::Request{};
  key.clear();  // (keeps its memory)
  request.key = std::move(key);
  request.tensors = std::move(tensors);
  completing_ = false;
  status_ = Status::OK();
  done_.store(false, std::memory_order_relaxed);
}

}  // namespace internal

// ---- Handle -----------------------------------------------------------------------------------

namespace {
const std::vector<int64_t>& Empty() {
  static const std::vector<int64_t> empty;
  return empty;
}
}  // namespace

Handle::Handle(std::shared_ptr<internal::Operation> op) : op_(std::move(op)) {}

bool Handle::Ready() const {
  return op_ == nullptr || op_->done();
}

Status Handle::Wait() const {
  if (op_ == nullptr) return FailedPrecondition("Wait() on an empty hvd::Handle");
  internal::RunRoundsUntilDone(op_.get(), std::chrono::steady_clock::time_point::max());
  return op_->Wait();
}

Status Handle::WaitFor(std::chrono::milliseconds timeout) const {
  if (op_ == nullptr) return FailedPrecondition("WaitFor() on an empty hvd::Handle");
  if (op_->done()) return op_->status();  // (no clock read: hvd_run_allreduce_for's usual case)
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  internal::RunRoundsUntilDone(op_.get(), deadline);
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(
      std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{}));
  if (!op_->WaitFor(left)) {
    if (internal::OnBackgroundThread()) return op_->BackgroundWaitError();
    return DeadlineExceeded("operation '" + op_->request.key + "' did not complete within " +
                            std::to_string(timeout.count()) + " ms; it is still pending");
  }
  return op_->status();
}

namespace {
const internal::Operation::Result* ResultAt(const std::shared_ptr<internal::Operation>& op,
                                            size_t i) {
  return op != nullptr && i < op->results.size() ? &op->results[i] : nullptr;
}
}  // namespace

size_t Handle::output_count() const {
  return op_ ? op_->results.size() : 0;
}
const void* Handle::output_data(size_t i) const {
  const auto* r = ResultAt(op_, i);
  if (r == nullptr) return nullptr;
  return r->device_data != nullptr ? r->device_data : r->data.data();
}
size_t Handle::output_bytes(size_t i) const {
  const auto* r = ResultAt(op_, i);
  if (r == nullptr) return 0;
  return r->device_data != nullptr ? r->device_bytes : r->data.size();
}
int Handle::output_device(size_t i) const {
  const auto* r = ResultAt(op_, i);
  return r != nullptr && r->device_data != nullptr ? r->device->ordinal() : -1;
}
const std::vector<int64_t>& Handle::output_shape(size_t i) const {
  const auto* r = ResultAt(op_, i);
  return r ? r->shape : Empty();
}
const std::vector<int64_t>& Handle::output_splits(size_t i) const {
  const auto* r = ResultAt(op_, i);
  return r ? r->splits : Empty();
}
const std::vector<int64_t>& Handle::received_splits() const {
  return output_splits(0);
}
int Handle::last_joined_rank() const {
  return op_ ? op_->last_joined_rank : -1;
}

}  // namespace hvd
