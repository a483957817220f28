// What the public API's translation units (core/api.cc, api_session.cc, api_sets.cc) share: the
// current session and turning a call into a submitted operation. Not exported from libhvd.so.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/context.h"
#include "core/operation.h"
#include "hvd/hvd.h"

namespace hvd::internal {

// The session Init() created, or null (core/api_session.cc).
std::shared_ptr<runtime::core::Context> Current();

// Why there is no session: never initialized, or shut down (what a call made then says).
std::string NotInitialized();

// Unnamed operations are numbered from 0 again (a new session).
void ResetUnnamedNames();

// Whether this process was forked from the one whose Init made the session (a DataLoader worker,
// a user's os.fork()) and has not shut that copy down: it must not submit into it. Takes no lock
// (a thread of the parent's may have held one at the fork).
bool InForkedChild();
// The error for `what` (an operation) submitted in such a process.
Status ForkedChildError(const char* what);

// FailedPrecondition when called on the background thread (from a callback), where a blocking
// call would wait for that very thread; `fn` names the call.
Status NotFromCallback(const char* fn);

// A new operation of `type` named `key` for `process_set`.
std::shared_ptr<Operation> NewOp(runtime::negotiation::OpType type, std::string key, Callback cb,
                                 int process_set = kGlobalProcessSet);

// Submits `op` to the current engine, or completes it at once with `error` (or with "not
// initialized"). Inside a CallerWaits scope the engine may run the operation on this thread
// (HVD_RUN_ON_CALLER), so that it is complete on return.
Handle Submit(std::shared_ptr<Operation> op, const Status& error = Status::OK());

// Before a thread waits for `op` (Handle::Wait, Handle::WaitFor): the current engine may run
// its rounds on this thread until `op` completes or `until` passes (Engine::RunUntilDone), so
// that an asynchronous operation waited for costs no tick.
void RunRoundsUntilDone(Operation* op, std::chrono::steady_clock::time_point until);

// Around a submission the calling thread waits for at once (the synchronous calls): the engine
// may then run it on this thread instead of handing it to the background thread and back, until
// it completes or `until` passes (then the background thread goes on with it).
class CallerWaits {
 public:
  explicit CallerWaits(
      std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  ~CallerWaits();
  CallerWaits(const CallerWaits&) = delete;
  CallerWaits& operator=(const CallerWaits&) = delete;

 private:
  const bool was_;
  const std::chrono::steady_clock::time_point was_until_;
};

}  // namespace hvd::internal
