// Clang thread-safety annotations (no-ops under other compilers), as in leveldb and Abseil.
#pragma once

#if defined(__clang__)
#define HVD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HVD_THREAD_ANNOTATION(x)
#endif

#define GUARDED_BY(x) HVD_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) HVD_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) HVD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) HVD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
