/* Shared by the C ABI test's files (c_api_test.c, c_api_bad_args.c): its failure macro and the
 * helpers both use. C, not C++: the point is that the ABI compiles as C. */
#ifndef HVD_TESTS_RUNTIME_C_API_TEST_H_
#define HVD_TESTS_RUNTIME_C_API_TEST_H_

#include <stdio.h>

#include "hvd/c_api.h"

/* Prints where and why, then returns 1 from the calling test function. */
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "c_api_test: %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      return 1;                                                   \
    }                                                             \
  } while (0)

/* A CPU tensor descriptor over `data`. */
hvd_tensor Desc(void* data, hvd_dtype_t dtype, int ndim, const int64_t* shape);

/* An operation that must fail: hvd_wait returns non-zero and hvd_last_error says something (and
 * contains `part` when given). Releases the handle. Returns 0 when it failed as wanted. */
int ExpectFails(hvd_handle* h, const char* what, const char* part);

/* NULL arguments and bad descriptors, each refused with a message naming it.
 * REQUIRES: hvd is initialized on one rank with dynamic process sets and only the global set. */
int BadArguments(void);

#endif /* HVD_TESTS_RUNTIME_C_API_TEST_H_ */
