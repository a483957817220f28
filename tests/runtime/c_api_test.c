/* The C ABI compiled as C and linked against libhvd.so: a single-process job (no environment)
 * exercising init, an async allreduce, allgather output access and error reporting; then a second
 * session through hvd_init_with_process_sets calling every entry point added in ABI version 2
 * (tensor descriptors, grouped and byte collectives, process sets, timeline control, handle
 * outputs) and their error paths; c_api_bad_args.c has the refusals of bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "c_api_test.h"
#include "hvd/c_api.h"

/* ---- ABI version 2 ----------------------------------------------------------------------------
 */

hvd_tensor Desc(void* data, hvd_dtype_t dtype, int ndim, const int64_t* shape) {
  hvd_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.shape = shape;
  t.ndim = ndim;
  t.dtype = dtype;
  t.device = -1;
  return t;
}

/* Waits for `h`, releases it and returns its code; `what` names it in the failure message. */
static int WaitOk(hvd_handle* h, const char* what) {
  int rc = hvd_wait(h);
  if (rc != 0) fprintf(stderr, "c_api_test: %s: code %d: %s\n", what, rc, hvd_last_error());
  return rc;
}

/* An operation that must fail: hvd_wait returns non-zero and hvd_last_error says something (and
 * contains `part` when given). Releases the handle. */
int ExpectFails(hvd_handle* h, const char* what, const char* part) {
  if (h == NULL) {
    fprintf(stderr, "c_api_test: %s: NULL handle\n", what);
    return 1;
  }
  int rc = hvd_wait(h);
  const char* msg = hvd_last_error();
  hvd_release(h);
  if (rc == 0 || msg == NULL || msg[0] == '\0' || (part != NULL && strstr(msg, part) == NULL)) {
    fprintf(stderr, "c_api_test: %s: want a failure%s%s, got code %d: '%s'\n", what,
            part ? " mentioning " : "", part ? part : "", rc, msg ? msg : "(null)");
    return 1;
  }
  return 0;
}

static int ReadFile(const char* path, char* buf, size_t max, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) return 1;
  *n = fread(buf, 1, max - 1, f);
  buf[*n] = '\0';
  fclose(f);
  return 0;
}

static int AbiVersion2(void) {
  CHECK(hvd_abi_version() == HVD_ABI_VERSION && HVD_ABI_VERSION == 2, "abi version %d",
        hvd_abi_version());

  /* Before init: process-set queries answer -1 / 0 / nothing. */
  CHECK(hvd_process_set_size(0) == -1 && hvd_process_set_rank(0) == -1, "set 0 before init");
  CHECK(hvd_process_set_included(0) == 0 && hvd_process_set_ids(NULL, 0) == 0, "ids before init");
  CHECK(hvd_start_timeline("/tmp/never.json", 0) != 0, "start_timeline before init succeeded");
  CHECK(hvd_stop_timeline() != 0, "stop_timeline before init succeeded");
  CHECK(hvd_init_with_process_sets(NULL, NULL, 1, 0) == 1, "num_sets 1 with NULL ranks");
  CHECK(strstr(hvd_last_error(), "num_sets") != NULL, "message: %s", hvd_last_error());
  {
    const int r2[2] = {0, 0};
    const int negative[2] = {1, -1};
    CHECK(hvd_init_with_process_sets(r2, negative, 2, 0) == 1 &&
              strstr(hvd_last_error(), "negative") != NULL,
          "negative set size: %s", hvd_last_error());
    const int one_set[1] = {2};
    CHECK(hvd_init_with_process_sets(r2, one_set, 1, 0) == 1 &&
              strstr(hvd_last_error(), "twice") != NULL,
          "a rank listed twice in a set: %s", hvd_last_error());
    CHECK(hvd_is_initialized() == 0, "initialized after failed inits");
  }

  /* A static set {0}: on a one-rank job these are the global set's ranks, so it is the global set
   * (as in Horovod); dynamic sets allowed. */
  const int set_ranks[1] = {0};
  const int set_sizes[1] = {1};
  CHECK(hvd_init_with_process_sets(set_ranks, set_sizes, 1, 1) == 0, "init with sets: %s",
        hvd_last_error());
  CHECK(hvd_is_initialized() == 1 && hvd_size() == 1, "initialized");
  /* Again on an initialized process: does nothing, returns 0. */
  CHECK(hvd_init_with_process_sets(set_ranks, set_sizes, 1, 1) == 0, "second init: %s",
        hvd_last_error());
  CHECK(hvd_init() == 0, "hvd_init on an initialized process: %s", hvd_last_error());

  int ids[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  CHECK(hvd_process_set_ids(ids, 8) == 1 && ids[0] == 0, "ids: %d %d", ids[0], ids[1]);
  CHECK(hvd_process_set_ids(ids, 0) == 1, "ids with a short buffer must still count all");
  CHECK(hvd_process_set_rank(0) == 0 && hvd_process_set_size(0) == 1, "set 0 rank/size");
  CHECK(hvd_process_set_included(0) == 1, "included");
  int ranks[4] = {-1, -1, -1, -1};
  CHECK(hvd_process_set_ranks(0, ranks, 4) == 1 && ranks[0] == 0, "set 0 ranks");
  CHECK(hvd_process_set_ranks(7, ranks, 4) == -1, "unknown set ranks");
  CHECK(strstr(hvd_last_error(), "7") != NULL, "unknown set message: %s", hvd_last_error());
  CHECK(hvd_process_set_rank(7) == -1 && hvd_process_set_size(7) == -1 &&
            hvd_process_set_included(7) == 0,
        "unknown set queries");

  /* Allreduce, float with prescale and postscale, on the global set, into another buffer. */
  float in[4] = {1, 2, 3, 4}, out[4] = {0, 0, 0, 0};
  int64_t shape4[1] = {4};
  hvd_tensor tin = Desc(in, HVD_FLOAT32, 1, shape4), tout = Desc(out, HVD_FLOAT32, 1, shape4);
  hvd_handle* h = hvd_enqueue_allreduce("ar.f32", &tin, &tout, HVD_SUM, 3.0, 0.5, 0);
  CHECK(WaitOk(h, "allreduce float") == 0, "allreduce float");
  CHECK(hvd_handle_output_count(h) == 0, "allreduce has no handle output");
  hvd_release(h);
  CHECK(out[0] == 1.5f && out[3] == 6.0f && in[3] == 4.0f, "scaled allreduce: %f %f",
        (double)out[0], (double)out[3]);

  /* The synchronous entry: the same result, and the handle is waited for and released alike. */
  out[0] = out[3] = 0;
  CHECK(WaitOk(h = hvd_run_allreduce("ar.f32.run", &tin, &tout, HVD_SUM, 3.0, 0.5, 0),
               "hvd_run_allreduce") == 0,
        "hvd_run_allreduce");
  hvd_release(h);
  CHECK(out[0] == 1.5f && out[3] == 6.0f, "hvd_run_allreduce: %f %f", (double)out[0],
        (double)out[3]);
  CHECK(ExpectFails(hvd_run_allreduce("ar.null", NULL, &tout, HVD_SUM, 1.0, 1.0, 0),
                    "hvd_run_allreduce(NULL)", "input or output is NULL") == 0,
        "hvd_run_allreduce with a NULL input");
  {
    /* reserved must be 0: it was taken as it came (an uninitialized or future descriptor). */
    hvd_tensor odd = tin;
    odd.reserved = 5;
    CHECK(ExpectFails(hvd_enqueue_allreduce("ar.reserved", &odd, &tout, HVD_SUM, 1.0, 1.0, 0),
                      "reserved = 5", "it must be 0") == 0,
          "a descriptor with reserved = 5");
  }

  /* Run and wait in one call: completed (nothing pending), failed (the message kept), and with
   * no place for a pending handle (it waits to the end). */
  out[0] = out[3] = 0;
  hvd_handle* pending = (hvd_handle*)&pending; /* must come back NULL */
  int frc = hvd_run_allreduce_for("ar.f32.for", &tin, &tout, HVD_SUM, 3.0, 0.5, 0, 1000, &pending);
  CHECK(frc == 0 && pending == NULL && out[0] == 1.5f && out[3] == 6.0f,
        "hvd_run_allreduce_for: code %d, pending %p, %f %f", frc, (void*)pending, (double)out[0],
        (double)out[3]);
  frc = hvd_run_allreduce_for("ar.for.null", NULL, &tout, HVD_SUM, 1.0, 1.0, 0, 1000, &pending);
  CHECK(frc != 0 && pending == NULL && strstr(hvd_last_error(), "input or output is NULL"),
        "hvd_run_allreduce_for(NULL): code %d, '%s'", frc, hvd_last_error());
  out[0] = 0;
  frc = hvd_run_allreduce_for("ar.f32.for2", &tin, &tout, HVD_SUM, 3.0, 0.5, 0, 0, NULL);
  CHECK(frc == 0 && out[0] == 1.5f, "hvd_run_allreduce_for without pending: code %d", frc);

  /* int16 max: the input is kept, the output gets it. */
  int16_t i16[3] = {-7, 300, 32767}, o16[3] = {0, 0, 0};
  int64_t shape3[1] = {3};
  hvd_tensor ti16 = Desc(i16, HVD_INT16, 1, shape3), to16 = Desc(o16, HVD_INT16, 1, shape3);
  CHECK(WaitOk(h = hvd_enqueue_allreduce("ar.i16", &ti16, &to16, HVD_MAX, 1.0, 1.0, 0),
               "allreduce int16") == 0,
        "allreduce int16");
  hvd_release(h);
  CHECK(o16[0] == -7 && o16[1] == 300 && o16[2] == 32767, "int16: %d %d %d", o16[0], o16[1],
        o16[2]);
  CHECK(WaitOk(h = hvd_enqueue_allreduce("ar.i16.sum", &ti16, &ti16, HVD_SUM, 1.0, 1.0, 0),
               "allreduce int16 sum in place") == 0,
        "allreduce int16 sum");
  hvd_release(h);
  CHECK(i16[1] == 300, "int16 in place: %d", i16[1]);

  size_t bytes = 0;
  /* bool: one byte, results are 0 or 1 (a 2 becomes 1). */
  uint8_t b[4] = {0, 1, 2, 0}, bo[4] = {9, 9, 9, 9};
  int64_t shapeb[2] = {2, 2};
  hvd_tensor tb = Desc(b, HVD_BOOL, 2, shapeb), tbo = Desc(bo, HVD_BOOL, 2, shapeb);
  CHECK(WaitOk(h = hvd_enqueue_allreduce("ar.bool", &tb, &tbo, HVD_SUM, 1.0, 1.0, 0),
               "allreduce bool") == 0,
        "allreduce bool");
  hvd_release(h);
  CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 0, "bool or: %d %d %d %d", bo[0], bo[1],
        bo[2], bo[3]);
  CHECK(WaitOk(h = hvd_enqueue_allreduce("ar.bool.min", &tb, &tbo, HVD_MIN, 1.0, 1.0, 0),
               "allreduce bool min") == 0,
        "allreduce bool min");
  hvd_release(h);
  CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 0, "bool and: %d %d %d %d", bo[0], bo[1],
        bo[2], bo[3]);
  if (ExpectFails(hvd_enqueue_allreduce("ar.bool.avg", &tb, &tbo, HVD_AVERAGE, 1.0, 1.0, 0),
                  "bool average", NULL))
    return 1;
  CHECK(WaitOk(h = hvd_enqueue_reducescatter("rs.bool", &tb, HVD_SUM, 1.0, 1.0, 0),
               "reducescatter bool") == 0,
        "reducescatter bool");
  const uint8_t* rsb = (const uint8_t*)hvd_handle_output_at(h, 0, &bytes);
  CHECK(rsb != NULL && bytes == 4 && rsb[1] == 1 && rsb[2] == 1 && rsb[3] == 0,
        "reducescatter bool or: %d %d %d", rsb ? rsb[1] : -1, rsb ? rsb[2] : -1, rsb ? rsb[3] : -1);
  hvd_release(h);

  /* Adasum on float (one rank: the input); refused on integers. */
  float ad[4] = {1, -2, 3, -4}, ado[4] = {0, 0, 0, 0};
  hvd_tensor tad = Desc(ad, HVD_FLOAT32, 1, shape4), tado = Desc(ado, HVD_FLOAT32, 1, shape4);
  CHECK(WaitOk(h = hvd_enqueue_allreduce("ar.adasum", &tad, &tado, HVD_ADASUM, 1.0, 1.0, 0),
               "adasum") == 0,
        "adasum");
  hvd_release(h);
  CHECK(ado[0] == 1.0f && ado[1] == -2.0f && ado[3] == -4.0f, "adasum of one rank: %f %f",
        (double)ado[0], (double)ado[3]);
  if (ExpectFails(hvd_enqueue_allreduce("ar.adasum.int", &ti16, &to16, HVD_ADASUM, 1.0, 1.0, 0),
                  "adasum on int16", "Adasum"))
    return 1;

  /* Grouped allreduce: float32 and float64, averaged with postscale. */
  float g0[2] = {1, 2};
  double g1[3] = {10, 20, 30}, g1o[3] = {0, 0, 0};
  int64_t shape2[1] = {2};
  hvd_tensor gin[2] = {Desc(g0, HVD_FLOAT32, 1, shape2), Desc(g1, HVD_FLOAT64, 1, shape3)};
  hvd_tensor gout[2] = {Desc(g0, HVD_FLOAT32, 1, shape2), Desc(g1o, HVD_FLOAT64, 1, shape3)};
  CHECK(WaitOk(h = hvd_enqueue_grouped_allreduce("gar", 2, gin, gout, HVD_AVERAGE, 1.0, 2.0, 0),
               "grouped allreduce") == 0,
        "grouped allreduce");
  hvd_release(h);
  CHECK(g0[0] == 2.0f && g0[1] == 4.0f && g1o[2] == 60.0 && g1[2] == 30.0,
        "grouped allreduce: %f %f %f", (double)g0[0], (double)g0[1], g1o[2]);

  /* Allgather: output shape and splits. */
  int32_t rows[6] = {1, 2, 3, 4, 5, 6};
  int64_t shape32[2] = {3, 2};
  hvd_tensor trows = Desc(rows, HVD_INT32, 2, shape32);
  CHECK(WaitOk(h = hvd_enqueue_allgather("ag", &trows, 0), "allgather") == 0, "allgather");
  int64_t dims[4] = {0, 0, 0, 0}, splits[4] = {0, 0, 0, 0};
  const int32_t* ag = (const int32_t*)hvd_handle_output_at(h, 0, &bytes);
  CHECK(hvd_handle_output_count(h) == 1, "allgather output count %d", hvd_handle_output_count(h));
  CHECK(ag != NULL && bytes == sizeof rows && ag[5] == 6, "allgather output (%zu bytes)", bytes);
  CHECK(hvd_handle_output_shape_at(h, 0, dims, 4) == 2 && dims[0] == 3 && dims[1] == 2,
        "allgather shape");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 3, "allgather splits");
  CHECK(hvd_handle_output_at(h, 1, &bytes) == NULL && bytes == 0, "output 1 of one");
  CHECK(hvd_handle_output_at(h, -1, &bytes) == NULL && bytes == 0, "output -1");
  CHECK(hvd_handle_output_shape_at(h, 3, dims, 4) == 0, "shape of output 3");
  CHECK(hvd_handle_output_splits(h, 3, splits, 4) == 0, "splits of output 3");
  CHECK(hvd_handle_output_device_at(h, 0) == -1, "a host allgather's result is in host memory");
  CHECK(hvd_handle_output_device_at(h, 1) == -1 && hvd_handle_output_device_at(NULL, 0) == -1,
        "device of no result");
  /* A second reference keeps the result after the first is released. */
  hvd_handle* shared = hvd_handle_share(h);
  CHECK(shared != NULL && hvd_handle_share(NULL) == NULL, "hvd_handle_share");
  hvd_release(h);
  ag = (const int32_t*)hvd_handle_output_at(shared, 0, &bytes);
  CHECK(ag != NULL && bytes == sizeof rows && ag[5] == 6, "the shared handle's result");
  hvd_release(shared);

  /* Grouped allgather: one result per tensor. */
  int64_t gag_shape1[1] = {4};
  hvd_tensor gag[2] = {trows, Desc(in, HVD_FLOAT32, 1, gag_shape1)};
  CHECK(WaitOk(h = hvd_enqueue_grouped_allgather("gag", 2, gag, 0), "grouped allgather") == 0,
        "grouped allgather");
  CHECK(hvd_handle_output_count(h) == 2, "grouped allgather count %d", hvd_handle_output_count(h));
  const float* gf = (const float*)hvd_handle_output_at(h, 1, &bytes);
  CHECK(gf != NULL && bytes == 4 * sizeof(float) && gf[3] == 4.0f, "grouped allgather output 1");
  CHECK(hvd_handle_output_shape_at(h, 1, dims, 4) == 1 && dims[0] == 4, "grouped shape 1");
  CHECK(hvd_handle_output_splits(h, 1, splits, 4) == 1 && splits[0] == 4, "grouped splits 1");
  CHECK(hvd_handle_output_shape_at(h, 0, dims, 4) == 2 && dims[0] == 3, "grouped shape 0");
  hvd_release(h);

  /* Broadcast: root 0 keeps its tensor. */
  CHECK(WaitOk(h = hvd_enqueue_broadcast("bc", &tin, 0, 0), "broadcast") == 0, "broadcast");
  hvd_release(h);
  CHECK(in[0] == 1.0f && in[3] == 4.0f, "broadcast changed the root's tensor");
  if (ExpectFails(hvd_enqueue_broadcast("bc.bad", &tin, 3, 0), "broadcast root 3", "root"))
    return 1;

  /* Alltoall without and with splits. */
  int64_t shape41[2] = {4, 1};
  hvd_tensor ta = Desc(in, HVD_FLOAT32, 2, shape41);
  CHECK(WaitOk(h = hvd_enqueue_alltoall("a2a", &ta, NULL, 0, 0), "alltoall") == 0, "alltoall");
  const float* a2a = (const float*)hvd_handle_output_at(h, 0, &bytes);
  CHECK(a2a != NULL && bytes == sizeof in && a2a[2] == 3.0f, "alltoall output");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 4, "alltoall splits");
  CHECK(hvd_handle_output_shape_at(h, 0, dims, 4) == 2 && dims[0] == 4 && dims[1] == 1,
        "alltoall shape");
  hvd_release(h);
  const int64_t a2a_splits[1] = {4};
  CHECK(
      WaitOk(h = hvd_enqueue_alltoall("a2a.splits", &ta, a2a_splits, 1, 0), "alltoall splits") == 0,
      "alltoall with splits");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 4, "alltoall splits");
  hvd_release(h);
  const int64_t bad_splits[2] = {2, 2};
  if (ExpectFails(hvd_enqueue_alltoall("a2a.bad", &ta, bad_splits, 2, 0), "alltoall 2 splits",
                  "splits"))
    return 1;
  if (ExpectFails(hvd_enqueue_alltoall("a2a.neg", &ta, bad_splits, -1, 0), "alltoall nsplits -1",
                  "nsplits"))
    return 1;

  /* Reducescatter with prescale and postscale: one rank gets every row. */
  float rs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t shape42[2] = {4, 2};
  hvd_tensor trs = Desc(rs, HVD_FLOAT32, 2, shape42);
  CHECK(WaitOk(h = hvd_enqueue_reducescatter("rs", &trs, HVD_SUM, 2.0, 0.25, 0), "reducescatter") ==
            0,
        "reducescatter");
  const float* rso = (const float*)hvd_handle_output_at(h, 0, &bytes);
  CHECK(rso != NULL && bytes == sizeof rs && rso[0] == 0.5f && rso[7] == 4.0f,
        "reducescatter output: %f %f", rso ? (double)rso[0] : -1.0, rso ? (double)rso[7] : -1.0);
  CHECK(hvd_handle_output_shape_at(h, 0, dims, 4) == 2 && dims[0] == 4 && dims[1] == 2,
        "reducescatter shape");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 4, "reducescatter splits");
  hvd_release(h);
  if (ExpectFails(hvd_enqueue_reducescatter("rs.max", &trs, HVD_MAX, 1.0, 1.0, 0),
                  "reducescatter max", "Sum and Average"))
    return 1;

  /* Grouped reducescatter. */
  hvd_tensor grs[2] = {trs, Desc(in, HVD_FLOAT32, 1, shape4)};
  CHECK(WaitOk(h = hvd_enqueue_grouped_reducescatter("grs", 2, grs, HVD_AVERAGE, 1.0, 1.0, 0),
               "grouped reducescatter") == 0,
        "grouped reducescatter");
  CHECK(hvd_handle_output_count(h) == 2, "grouped reducescatter count");
  const float* grs1 = (const float*)hvd_handle_output_at(h, 1, &bytes);
  CHECK(grs1 != NULL && bytes == 4 * sizeof(float) && grs1[1] == 2.0f, "grouped rs output 1");
  hvd_release(h);

  /* Byte collectives. */
  CHECK(WaitOk(h = hvd_enqueue_allgather_bytes("agb", "hello", 5, 0), "allgather bytes") == 0,
        "allgather bytes");
  const char* agb = (const char*)hvd_handle_output_at(h, 0, &bytes);
  CHECK(agb != NULL && bytes == 5 && memcmp(agb, "hello", 5) == 0, "allgather bytes output");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 5, "allgather bytes splits");
  hvd_release(h);
  CHECK(WaitOk(h = hvd_enqueue_allgather_bytes("agb.empty", NULL, 0, 0), "allgather 0 bytes") == 0,
        "allgather of no bytes");
  CHECK(hvd_handle_output_splits(h, 0, splits, 4) == 1 && splits[0] == 0, "0 bytes splits");
  hvd_release(h);
  CHECK(WaitOk(h = hvd_enqueue_broadcast_bytes("bcb", "abc", 3, 0, 0), "broadcast bytes") == 0,
        "broadcast bytes");
  hvd_release(h);

  /* Barrier and join on a set. */

  CHECK(hvd_process_set_barrier(0) == 0, "global barrier: %s", hvd_last_error());
  CHECK(hvd_process_set_barrier(7) != 0, "barrier on an unknown set succeeded");
  int last = -5;
  CHECK(hvd_process_set_join(0, &last) == 0 && last == 0, "set join: %d %s", last,
        hvd_last_error());
  CHECK(hvd_process_set_join(0, NULL) == 0, "join without last rank: %s", hvd_last_error());
  /* Barrier and join as operations. */
  h = hvd_enqueue_barrier(0);
  CHECK(hvd_wait_for(h, 10000) == 0 && hvd_handle_last_joined_rank(h) == -1, "barrier op: %s",
        hvd_last_error());
  hvd_release(h);
  h = hvd_enqueue_join(0);
  CHECK(hvd_wait_for(h, 10000) == 0 && hvd_handle_last_joined_rank(h) == 0, "join op: %d %s",
        hvd_handle_last_joined_rank(h), hvd_last_error());
  hvd_release(h);
  CHECK(hvd_handle_last_joined_rank(NULL) == -1, "last joined rank of NULL");
  h = hvd_enqueue_barrier(7);
  CHECK(hvd_wait(h) != 0 && strstr(hvd_last_error(), "7") != NULL, "barrier op on set 7: %s",
        hvd_last_error());
  hvd_release(h);
  CHECK(hvd_is_homogeneous() == 1, "one rank on one host is homogeneous");

  /* Timeline to a temporary file. */
  char dir[] = "/tmp/hvd_c_api_test.XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char path[256], missing[256];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  snprintf(missing, sizeof missing, "%s/no/such/dir/trace.json", dir);
  CHECK(hvd_start_timeline(NULL, 0) == 1, "start_timeline(NULL)");
  CHECK(hvd_start_timeline(missing, 0) == 1 && strstr(hvd_last_error(), missing) != NULL,
        "unwritable timeline: %s", hvd_last_error());
  CHECK(hvd_start_timeline(path, 1) == 0, "start_timeline: %s", hvd_last_error());
  CHECK(hvd_start_timeline(path, 0) == 6, "second start_timeline: %s", hvd_last_error());
  CHECK(WaitOk(h = hvd_enqueue_allreduce("traced.tensor", &tin, &tout, HVD_SUM, 1.0, 1.0, 0),
               "traced allreduce") == 0,
        "traced allreduce");
  hvd_release(h);
  CHECK(hvd_stop_timeline() == 0, "stop_timeline: %s", hvd_last_error());
  CHECK(hvd_stop_timeline() == 6, "second stop_timeline: %s", hvd_last_error());
  static char trace[1 << 16];
  size_t n = 0;
  CHECK(ReadFile(path, trace, sizeof trace, &n) == 0 && n > 0, "trace file empty or missing");
  CHECK(trace[0] == '[', "trace starts with '%c'", trace[0]);
  CHECK(strstr(trace, "traced.tensor") != NULL, "trace lacks the tensor name");
  unlink(path);
  rmdir(dir);

  /* hvd_wait_for: complete in time (or, checked at once, possibly still pending). */
  h = hvd_enqueue_allreduce("wf", &tin, &tout, HVD_SUM, 1.0, 1.0, 0);
  int rc = hvd_wait_for(h, 0);
  CHECK(rc == 0 || rc == 4, "wait_for(0): %d %s", rc, hvd_last_error());
  CHECK(hvd_wait_for(h, 5000) == 0, "wait_for: %s", hvd_last_error());
  CHECK(hvd_wait_for(h, -3) == 0, "wait_for a complete handle with a negative timeout");
  hvd_release(h);
  CHECK(hvd_wait_for(NULL, 10) == 1, "wait_for(NULL)");
  CHECK(hvd_wait(NULL) == 1 && hvd_last_error()[0] != '\0', "wait(NULL)");
  CHECK(hvd_handle_output_count(NULL) == 0 && hvd_handle_output_at(NULL, 0, &bytes) == NULL &&
            bytes == 0,
        "outputs of NULL");
  CHECK(hvd_handle_output_shape_at(NULL, 0, dims, 4) == 0 &&
            hvd_handle_output_splits(NULL, 0, splits, 4) == 0,
        "shape/splits of NULL");

  /* Process sets: adding {0} on a one-rank job (the global set has these ranks). */
  int id = -1;
  rc = hvd_add_process_set(set_ranks, 1, &id);
  CHECK(rc == 3 /* ALREADY_EXISTS */ && strstr(hvd_last_error(), "already exists") != NULL,
        "add {0} again: code %d id %d: %s", rc, id, hvd_last_error());
  CHECK(hvd_add_process_set(NULL, 1, &id) == 1, "add NULL ranks");
  const int out_of_range[1] = {3};
  CHECK(hvd_add_process_set(out_of_range, 1, &id) != 0, "add {3} on a one-rank job succeeded");
  CHECK(hvd_add_process_set(set_ranks, 0, &id) != 0, "add an empty set succeeded");
  CHECK(hvd_remove_process_set(0) != 0, "removing the global set succeeded");
  CHECK(hvd_remove_process_set(1) == 2 /* NOT_FOUND */, "remove an unknown set: %s",
        hvd_last_error());
  CHECK(hvd_process_set_ids(ids, 8) == 1 && ids[0] == 0, "ids after the failed removal");
  CHECK(hvd_process_set_size(1) == -1, "size of an unknown set");
  if (ExpectFails(hvd_enqueue_allreduce("unknown", &tin, &tout, HVD_SUM, 1.0, 1.0, 1),
                  "allreduce on an unknown set", "does not exist"))
    return 1;
  CHECK(strstr(hvd_last_error(), "") != NULL && rc == 3, "adding the global set's ranks");

  if (BadArguments() != 0) return 1;

  CHECK(hvd_shutdown() == 0, "shutdown: %s", hvd_last_error());
  CHECK(hvd_shutdown() == 0, "second shutdown: %s", hvd_last_error());
  CHECK(hvd_process_set_ids(ids, 8) == 0, "ids after shutdown");
  CHECK(hvd_stop_timeline() != 0, "stop_timeline after shutdown succeeded");
  return 0;
}

int main(void) {
  unsetenv("HVD_SIZE");
  unsetenv("HOROVOD_SIZE");
  unsetenv("HVD_RANK");
  unsetenv("HVD_STACK_DUMP_SIGNAL");
  float x[5] = {1, 2, 3, 4, 5};
  int64_t shape[1] = {5};

  hvd_handle* early = hvd_allreduce_async("early", x, x, HVD_FLOAT32, 1, shape, HVD_SUM, 1.0, 1.0);
  CHECK(hvd_wait(early) != 0, "allreduce before init must fail");
  CHECK(strstr(hvd_last_error(), "Init") != NULL, "error should mention Init: %s",
        hvd_last_error());
  hvd_release(early);

  CHECK(hvd_init() == 0, "hvd_init: %s", hvd_last_error());
  CHECK(hvd_is_initialized() == 1 && hvd_rank() == 0 && hvd_size() == 1, "topology");
  CHECK(hvd_local_size() == 1 && hvd_cross_size() == 1, "local/cross sizes");
  /* No HVD_STACK_DUMP_SIGNAL (hvdrun's agent sets it): no stack dump handler. */
  CHECK(hvd_native_stack_dump_signal() == 0, "a native stack handler without the variable");

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
  if (AbiVersion2() != 0) return 1;
  printf("c_api_test: OK\n");
  return 0;
}
