/* The C ABI's refusals: NULL arguments, bad descriptors and the first calls' bad shapes, each a
 * handle that fails with a message naming what was wrong (never a crash or a silent result). */
#include <stdint.h>
#include <string.h>

#include "c_api_test.h"
#include "hvd/c_api.h"

int BadArguments(void) {
  float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  int64_t shape4[1] = {4};
  hvd_tensor tin = Desc(in, HVD_FLOAT32, 1, shape4), tout = Desc(out, HVD_FLOAT32, 1, shape4);
  if (ExpectFails(hvd_enqueue_allreduce("n", NULL, &tout, HVD_SUM, 1, 1, 0), "allreduce NULL",
                  "NULL") ||
      ExpectFails(hvd_enqueue_allreduce("n", &tin, NULL, HVD_SUM, 1, 1, 0), "allreduce NULL out",
                  "NULL") ||
      ExpectFails(hvd_enqueue_grouped_allreduce("n", 2, NULL, NULL, HVD_SUM, 1, 1, 0),
                  "grouped allreduce NULL", "NULL") ||
      ExpectFails(hvd_enqueue_grouped_allreduce("n", 0, NULL, NULL, HVD_SUM, 1, 1, 0),
                  "grouped allreduce of none", NULL) ||
      ExpectFails(hvd_enqueue_allgather("n", NULL, 0), "allgather NULL", "NULL") ||
      ExpectFails(hvd_enqueue_grouped_allgather("n", 1, NULL, 0), "grouped allgather NULL",
                  "NULL") ||
      ExpectFails(hvd_enqueue_broadcast("n", NULL, 0, 0), "broadcast NULL", "NULL") ||
      ExpectFails(hvd_enqueue_alltoall("n", NULL, NULL, 0, 0), "alltoall NULL", "NULL") ||
      ExpectFails(hvd_enqueue_reducescatter("n", NULL, HVD_SUM, 1, 1, 0), "reducescatter NULL",
                  "NULL") ||
      ExpectFails(hvd_enqueue_grouped_reducescatter("n", 3, NULL, HVD_SUM, 1, 1, 0),
                  "grouped reducescatter NULL", "NULL") ||
      ExpectFails(hvd_enqueue_allgather_bytes("n", NULL, 5, 0), "allgather_bytes NULL", "null") ||
      ExpectFails(hvd_enqueue_broadcast_bytes("n", NULL, 5, 0, 0), "broadcast_bytes NULL",
                  "null") ||
      /* SIZE_MAX was a "negative dimension in shape [-1]" */
      ExpectFails(hvd_enqueue_allgather_bytes("n", in, SIZE_MAX, 0), "allgather_bytes SIZE_MAX",
                  "more than any buffer holds") ||
      ExpectFails(hvd_enqueue_broadcast_bytes("n", in, SIZE_MAX, 0, 0), "broadcast_bytes SIZE_MAX",
                  "more than any buffer holds"))
    return 1;
  hvd_tensor no_data = Desc(NULL, HVD_FLOAT32, 1, shape4);
  hvd_tensor no_shape = Desc(in, HVD_FLOAT32, 1, NULL);
  hvd_tensor neg_ndim = Desc(in, HVD_FLOAT32, -1, shape4);
  hvd_tensor bad_dtype = Desc(in, (hvd_dtype_t)42, 1, shape4);
  hvd_tensor on_gpu = Desc(in, HVD_FLOAT32, 1, shape4);
  on_gpu.device = 0;
  if (ExpectFails(hvd_enqueue_allreduce("d", &no_data, &tout, HVD_SUM, 1, 1, 0), "data NULL",
                  "null") ||
      ExpectFails(hvd_enqueue_allreduce("d", &bad_dtype, &bad_dtype, HVD_SUM, 1, 1, 0), "dtype 42",
                  "dtype") ||
      ExpectFails(hvd_enqueue_allreduce("d", &on_gpu, &on_gpu, HVD_SUM, 1, 1, 0), "device 0",
                  "CUDA") ||
      ExpectFails(hvd_enqueue_allreduce("d", &tin, &tout, (hvd_reduce_op_t)17, 1, 1, 0), "op 17",
                  "op") ||
      ExpectFails(hvd_enqueue_allreduce("d", &tin, &tout, HVD_SUM, 1, 1, 9), "unknown set 9",
                  "process set 9") ||
      ExpectFails(hvd_enqueue_allgather("d", &no_shape, 0), "ndim 1 with shape NULL", "shape") ||
      ExpectFails(hvd_enqueue_allgather("d", &neg_ndim, 0), "ndim -1", "ndim") ||
      ExpectFails(hvd_enqueue_allreduce("d", &no_shape, &no_shape, HVD_SUM, 1, 1, 0),
                  "allreduce ndim 1 with shape NULL", "NULL shape") ||
      ExpectFails(hvd_enqueue_broadcast("d", &no_shape, 0, 0), "broadcast shape NULL",
                  "NULL shape") ||
      ExpectFails(hvd_enqueue_grouped_reducescatter("d", 1, &neg_ndim, HVD_SUM, 1, 1, 0),
                  "grouped reducescatter ndim -1", "negative"))
    return 1;
  /* The first calls (a buffer, ndim, shape) refuse the same shapes: they reduced one element. */
  int64_t split[1] = {4};
  if (ExpectFails(hvd_allreduce_async("l", in, out, HVD_FLOAT32, 1, NULL, HVD_SUM, 1, 1),
                  "hvd_allreduce_async shape NULL", "NULL shape") ||
      ExpectFails(hvd_allreduce_async("l", in, out, HVD_FLOAT32, -1, shape4, HVD_SUM, 1, 1),
                  "hvd_allreduce_async ndim -1", "negative") ||
      ExpectFails(hvd_allgather_async("l", in, HVD_FLOAT32, 1, NULL), "hvd_allgather_async",
                  "NULL shape") ||
      ExpectFails(hvd_broadcast_async("l", in, HVD_FLOAT32, 1, NULL, 0), "hvd_broadcast_async",
                  "NULL shape") ||
      ExpectFails(hvd_alltoall_async("l", in, HVD_FLOAT32, -2, shape4, split), "hvd_alltoall_async",
                  "negative") ||
      ExpectFails(hvd_reducescatter_async("l", in, HVD_FLOAT32, 1, NULL, HVD_SUM),
                  "hvd_reducescatter_async", "NULL shape"))
    return 1;

  return 0;
}
