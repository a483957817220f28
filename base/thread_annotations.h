// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), as in
// leveldb and Abseil: attributes under clang, nothing under other compilers. GCC builds the
// project; scripts/thread_safety.sh runs clang's -Wthread-safety over every first-party file so
// that the annotations are checked, not just written.
//
// The HVD_ prefix keeps them apart from Abseil's unprefixed GUARDED_BY & co. (pulled in by gRPC),
// so the include order of the two does not matter.
//
// The analysis only understands capabilities whose type is annotated: libstdc++'s std::mutex is
// not, so guard members with hvd::base::Mutex (base/mutex.h) rather than std::mutex.
#pragma once

#if defined(__clang__)
#define HVD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HVD_THREAD_ANNOTATION(x)
#endif

// A class that is a capability (a lock), named `x` in diagnostics.
#define HVD_CAPABILITY(x) HVD_THREAD_ANNOTATION(capability(x))
// An RAII class that acquires a capability in its constructor and releases it in its destructor.
#define HVD_SCOPED_CAPABILITY HVD_THREAD_ANNOTATION(scoped_lockable)

// A member read or written only with capability `x` held.
#define HVD_GUARDED_BY(x) HVD_THREAD_ANNOTATION(guarded_by(x))
// A pointer member whose pointee is read or written only with capability `x` held.
#define HVD_PT_GUARDED_BY(x) HVD_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this capability is acquired before (after) the named ones.
#define HVD_ACQUIRED_BEFORE(...) HVD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define HVD_ACQUIRED_AFTER(...) HVD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))

// The caller must hold the capabilities (exclusively, or at least shared).
#define HVD_REQUIRES(...) HVD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define HVD_REQUIRES_SHARED(...) HVD_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))

// The function acquires / releases the capabilities (no argument: `this`, for lock classes).
#define HVD_ACQUIRE(...) HVD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define HVD_ACQUIRE_SHARED(...) HVD_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define HVD_RELEASE(...) HVD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define HVD_RELEASE_SHARED(...) HVD_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
// The function tries to acquire; the first argument is the return value that means success.
#define HVD_TRY_ACQUIRE(...) HVD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// The caller must not hold the capabilities (the function acquires them itself).
#define HVD_EXCLUDES(...) HVD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function checks at run time that the capability is held (tells the analysis it is).
#define HVD_ASSERT_CAPABILITY(x) HVD_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to capability `x` (an accessor for a private mutex).
#define HVD_RETURN_CAPABILITY(x) HVD_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function. Use it only where the analysis cannot follow correct
// code, and say why next to it.
#define HVD_NO_THREAD_SAFETY_ANALYSIS HVD_THREAD_ANNOTATION(no_thread_safety_analysis)
