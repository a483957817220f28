// Clang thread-safety annotations (no-ops under other compilers), as in leveldb and Abseil.
// Each macro is defined only if absent: Abseil (pulled in by gRPC in the control plane) defines
// the same names, and whichever header comes first wins without a redefinition warning.
#pragma once

#if defined(__clang__)
#define HVD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HVD_THREAD_ANNOTATION(x)
#endif

#ifndef GUARDED_BY
#define GUARDED_BY(x) HVD_THREAD_ANNOTATION(guarded_by(x))
#endif
#ifndef PT_GUARDED_BY
#define PT_GUARDED_BY(x) HVD_THREAD_ANNOTATION(pt_guarded_by(x))
#endif
#ifndef REQUIRES
#define REQUIRES(...) HVD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#endif
#ifndef EXCLUDES
#define EXCLUDES(...) HVD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#endif
