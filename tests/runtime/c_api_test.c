/* The C ABI compiled as C and linked against libhvd.so: a single-process job (no environment)
 * exercising init, an async allreduce, allgather output access and error reporting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hvd/c_api.h"

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "c_api_test: %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      return 1;                                                \
    }                                                          \
  } while (0)

int main(void) {
  unsetenv("HVD_SIZE");
  unsetenv("HOROVOD_SIZE");
  unsetenv("HVD_RANK");
  float x[5] = {1, 2, 3, 4, 5};
  int64_t shape[1] = {5};

  hvd_handle* early = hvd_allreduce_async("early", x, x, HVD_FLOAT32, 1, shape, HVD_SUM, 1.0, 1.0);
  CHECK(hvd_wait(early) != 0, "allreduce before init must fail");
  CHECK(strstr(hvd_last_error(), "Init") != NULL, "error should mention Init: %s", hvd_last_error());
  hvd_release(early);

  CHECK(hvd_init() == 0, "hvd_init: %s", hvd_last_error());
  CHECK(hvd_is_initialized() == 1 && hvd_rank() == 0 && hvd_size() == 1, "topology");
  CHECK(hvd_local_size() == 1 && hvd_cross_size() == 1, "local/cross sizes");

  hvd_handle* h = hvd_allreduce_async("x", x, x, HVD_FLOAT32, 1, shape, HVD_SUM, 2.0, 1.0);
  CHECK(hvd_wait(h) == 0, "allreduce: %s", hvd_last_error());
  CHECK(hvd_poll(h) == 1, "poll after wait");
  CHECK(x[4] == 10.0f, "prescaled sum of one rank: got %f", (double)x[4]);
  hvd_release(h);

  int32_t rows[6] = {1, 2, 3, 4, 5, 6};
  int64_t rshape[2] = {3, 2};
  hvd_handle* g = hvd_allgather_async("g", rows, HVD_INT32, 2, rshape);
  CHECK(hvd_wait(g) == 0, "allgather: %s", hvd_last_error());
  size_t bytes = 0;
  const int32_t* out = (const int32_t*)hvd_handle_output(g, &bytes);
  int64_t dims[4];
  CHECK(bytes == sizeof rows && out[5] == 6, "allgather output");
  CHECK(hvd_handle_output_shape(g, dims, 4) == 2 && dims[0] == 3 && dims[1] == 2, "shape");
  hvd_release(g);

  hvd_handle* bad = hvd_broadcast_async("b", x, HVD_FLOAT32, 1, shape, 4);
  CHECK(hvd_wait(bad) == 1 /* INVALID_ARGUMENT */, "bad root: %s", hvd_last_error());
  hvd_release(bad);

  CHECK(hvd_barrier() == 0, "barrier: %s", hvd_last_error());
  CHECK(hvd_shutdown() == 0, "shutdown: %s", hvd_last_error());
  CHECK(hvd_is_initialized() == 0, "still initialized after shutdown");
  printf("c_api_test: OK\n");
  return 0;
}
