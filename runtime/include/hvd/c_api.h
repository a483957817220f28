/* hvd's C ABI, for language bindings (Python ctypes/cffi, Rust, Julia, ...).
 *
 * Conventions:
 *  - Functions that can fail return an hvd_status_code (0 = OK, values as hvd::StatusCode) and
 *    leave a message readable with hvd_last_error() on the same thread.
 *  - Asynchronous operations return an hvd_handle* that is never NULL; errors surface from
 *    hvd_wait(). Every handle must be released with hvd_release().
 *  - Buffers are the caller's and must stay valid until the operation completes.
 */
#ifndef HVD_C_API_H_
#define HVD_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_C_EXPORT __attribute__((visibility("default")))

typedef enum {
  HVD_FLOAT32 = 0,
  HVD_FLOAT64 = 1,
  HVD_FLOAT16 = 2,
  HVD_BFLOAT16 = 3,
  HVD_INT8 = 4,
  HVD_UINT8 = 5,
  HVD_INT32 = 6,
  HVD_INT64 = 7,
  HVD_INT16 = 8,
  HVD_BOOL = 9 /* one byte: 0 false, anything else true; results are 0 or 1 */
} hvd_dtype_t;

typedef enum {
  HVD_SUM = 0,
  HVD_AVERAGE = 1,
  HVD_MIN = 2,
  HVD_MAX = 3,
  HVD_PRODUCT = 4,
  HVD_ADASUM = 5
} hvd_reduce_op_t;

typedef struct hvd_handle hvd_handle;

HVD_C_EXPORT int hvd_init(void);
HVD_C_EXPORT int hvd_shutdown(void);
HVD_C_EXPORT int hvd_is_initialized(void);
HVD_C_EXPORT int hvd_rank(void);
HVD_C_EXPORT int hvd_size(void);
HVD_C_EXPORT int hvd_local_rank(void);
HVD_C_EXPORT int hvd_local_size(void);
HVD_C_EXPORT int hvd_cross_rank(void);
HVD_C_EXPORT int hvd_cross_size(void);
/* The message of the last failed call on this thread ("" when none). Valid until the next call. */
HVD_C_EXPORT const char* hvd_last_error(void);

/* In place when sendbuf == recvbuf. shape has ndim entries (ndim 0: a scalar). */
HVD_C_EXPORT hvd_handle* hvd_allreduce_async(const char* name, const void* sendbuf, void* recvbuf,
                                             hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                             hvd_reduce_op_t op, double prescale, double postscale);
HVD_C_EXPORT hvd_handle* hvd_allgather_async(const char* name, const void* sendbuf,
                                             hvd_dtype_t dtype, int ndim, const int64_t* shape);
HVD_C_EXPORT hvd_handle* hvd_broadcast_async(const char* name, void* buf, hvd_dtype_t dtype,
                                             int ndim, const int64_t* shape, int root);
/* splits: hvd_size() entries summing to at most the first dimension (the rows past their sum are
 * not sent), or NULL to divide the first dimension evenly. */
HVD_C_EXPORT hvd_handle* hvd_alltoall_async(const char* name, const void* sendbuf,
                                            hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                            const int64_t* splits);
HVD_C_EXPORT hvd_handle* hvd_reducescatter_async(const char* name, const void* sendbuf,
                                                 hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                                 hvd_reduce_op_t op);
HVD_C_EXPORT int hvd_barrier(void);
HVD_C_EXPORT int hvd_join(int* last_joined_rank);

/* ---- Since ABI version 2: tensors as descriptors, process sets, grouped and byte collectives,
 * timeline control. Every enqueue function returns a handle (never NULL) whose hvd_wait reports
 * the error, and takes a process set id (HVD_GLOBAL_PROCESS_SET: every rank). */

#define HVD_ABI_VERSION 2
#define HVD_GLOBAL_PROCESS_SET 0

/* The ABI version this library implements (HVD_ABI_VERSION of its build). */
HVD_C_EXPORT int hvd_abi_version(void);

/* 1 when this build made hvd's CUDA plugin (libhvd_cuda.so: device tensors, NCCL), whether or not
 * this host has a GPU; 0 otherwise (Horovod's cuda_built()). */
HVD_C_EXPORT int hvd_cuda_built(void);

/* A dense row-major tensor in the caller's memory. The descriptor, its shape array, the name and
 * any splits are read during the hvd_enqueue_* call only (a binding may reuse or free them when it
 * returns); the memory at `data` must stay valid until the operation completes. */
typedef struct hvd_tensor {
  void* data;
  const int64_t* shape; /* ndim entries; NULL allowed when ndim is 0 (a scalar) */
  int32_t ndim;
  int32_t dtype;    /* hvd_dtype_t */
  int32_t device;   /* -1: host memory; >= 0: that CUDA device */
  int32_t reserved; /* 0 */
  void* stream;     /* cudaStream_t the data was produced on, or NULL */
} hvd_tensor;

/* hvd_init with process sets registered at init (ids 1..num_sets, in order): set i has
 * set_sizes[i] ranks, consecutive in `ranks`. `dynamic` != 0 allows adding and removing sets
 * later. Calling it on an initialized process does nothing and returns 0. */
HVD_C_EXPORT int hvd_init_with_process_sets(const int* ranks, const int* set_sizes, int num_sets,
                                            int dynamic);

HVD_C_EXPORT hvd_handle* hvd_enqueue_allreduce(const char* name, const hvd_tensor* input,
                                               const hvd_tensor* output, hvd_reduce_op_t op,
                                               double prescale, double postscale, int process_set);
/* hvd_enqueue_allreduce for a caller that waits for the result at once (a synchronous
 * allreduce): when the runtime is idle the operation runs on the calling thread
 * (HVD_RUN_ON_CALLER), without handing it to the background thread and back, and is then
 * complete on return. Wait for and release the handle as for hvd_enqueue_allreduce. */
HVD_C_EXPORT hvd_handle* hvd_run_allreduce(const char* name, const hvd_tensor* input,
                                           const hvd_tensor* output, hvd_reduce_op_t op,
                                           double prescale, double postscale, int process_set);
/* hvd_run_allreduce, then waited for up to `timeout_ms`: one call where a synchronous allreduce
 * otherwise makes three (run, wait, release). The calling thread runs the rounds for at most
 * `timeout_ms` too (peers may be late); the background thread goes on after that. Returns 0 when
 * the operation completed (its handle released), its error code when it failed (the message in
 * hvd_last_error(), the handle released), or 4 (deadline exceeded) with *pending set to the handle
 * of the operation still running, to wait for and release as any; *pending is NULL in every other
 * case (a NULL `pending` waits until the operation completes). */
HVD_C_EXPORT int hvd_run_allreduce_for(const char* name, const hvd_tensor* input,
                                       const hvd_tensor* output, hvd_reduce_op_t op,
                                       double prescale, double postscale, int process_set,
                                       int64_t timeout_ms, hvd_handle** pending);
HVD_C_EXPORT hvd_handle* hvd_enqueue_grouped_allreduce(const char* name, int n,
                                                       const hvd_tensor* inputs,
                                                       const hvd_tensor* outputs,
                                                       hvd_reduce_op_t op, double prescale,
                                                       double postscale, int process_set);
HVD_C_EXPORT hvd_handle* hvd_enqueue_allgather(const char* name, const hvd_tensor* input,
                                               int process_set);
HVD_C_EXPORT hvd_handle* hvd_enqueue_grouped_allgather(const char* name, int n,
                                                       const hvd_tensor* inputs, int process_set);
/* root: a job rank, member of the process set. */
HVD_C_EXPORT hvd_handle* hvd_enqueue_broadcast(const char* name, const hvd_tensor* tensor, int root,
                                               int process_set);
/* splits: nsplits (= the set's size) entries summing to at most the first dimension, or NULL to
 * divide the first dimension evenly. */
HVD_C_EXPORT hvd_handle* hvd_enqueue_alltoall(const char* name, const hvd_tensor* input,
                                              const int64_t* splits, int nsplits, int process_set);
/* op: HVD_SUM or HVD_AVERAGE. */
HVD_C_EXPORT hvd_handle* hvd_enqueue_reducescatter(const char* name, const hvd_tensor* input,
                                                   hvd_reduce_op_t op, double prescale,
                                                   double postscale, int process_set);
HVD_C_EXPORT hvd_handle* hvd_enqueue_grouped_reducescatter(const char* name, int n,
                                                           const hvd_tensor* inputs,
                                                           hvd_reduce_op_t op, double prescale,
                                                           double postscale, int process_set);
/* Byte collectives for serialized objects of any length per rank: the output (per rank byte
 * counts in hvd_handle_output_splits) needs no size exchange by the caller. A byte broadcast's
 * output is on the non-root ranks; the root passes its bytes, the others may pass NULL, 0. */
HVD_C_EXPORT hvd_handle* hvd_enqueue_allgather_bytes(const char* name, const void* data, size_t n,
                                                     int process_set);
HVD_C_EXPORT hvd_handle* hvd_enqueue_broadcast_bytes(const char* name, const void* data, size_t n,
                                                     int root, int process_set);
HVD_C_EXPORT int hvd_process_set_barrier(int process_set);
/* Barrier and join as operations (waitable with a deadline, so a binding can stay interruptible);
 * a join handle's last joined rank: hvd_handle_last_joined_rank. */
HVD_C_EXPORT hvd_handle* hvd_enqueue_barrier(int process_set);
HVD_C_EXPORT hvd_handle* hvd_enqueue_join(int process_set);
HVD_C_EXPORT int hvd_handle_last_joined_rank(const hvd_handle* h);
/* 1 when every host runs the same number of ranks, else 0 (0 before init). */
HVD_C_EXPORT int hvd_is_homogeneous(void);
/* The signal hvd's native stack dump handler (hvd_init installs it for HVD_STACK_DUMP_SIGNAL) is
 * this process's handler for, else 0: a binding that writes stacks of its own may replace it. */
HVD_C_EXPORT int hvd_native_stack_dump_signal(void);
/* *last_joined_rank (may be NULL): the job rank that joined last. */
HVD_C_EXPORT int hvd_process_set_join(int process_set, int* last_joined_rank);

/* Process sets. hvd_add_process_set and hvd_remove_process_set are collective over the job and
 * need dynamic process sets. */
HVD_C_EXPORT int hvd_add_process_set(const int* ranks, int n, int* id);
HVD_C_EXPORT int hvd_remove_process_set(int id);
/* -1 when not a member, unknown set or not initialized. */
HVD_C_EXPORT int hvd_process_set_rank(int id);
HVD_C_EXPORT int hvd_process_set_size(int id);
HVD_C_EXPORT int hvd_process_set_included(int id);
/* Writes up to max ranks; returns the set's size, or -1 (message in hvd_last_error()). */
HVD_C_EXPORT int hvd_process_set_ranks(int id, int* ranks, int max);
/* Writes up to max ids (increasing); returns how many sets exist. */
HVD_C_EXPORT int hvd_process_set_ids(int* ids, int max);

/* Elastic jobs (hvdrun --min-np/--max-np). 1 when this process is an elastic worker. */
HVD_C_EXPORT int hvd_elastic_enabled(void);
/* The membership generation this session joined (0 first) and the newest one the launcher
 * published (latest >= joined); *only_removed = 1 when the newest only lost workers compared with
 * this session's. FAILED_PRECONDITION when not initialized or not elastic. */
HVD_C_EXPORT int hvd_elastic_generation(int64_t* joined, int64_t* latest, int* only_removed);
/* After a commit of a synced state: the launcher may count this worker as holding it (hvd.h,
 * ElasticCommitted). FAILED_PRECONDITION when not initialized or not elastic. */
HVD_C_EXPORT int hvd_elastic_committed(void);

/* Timeline (written by rank 0). */
HVD_C_EXPORT int hvd_start_timeline(const char* path, int mark_cycles);
HVD_C_EXPORT int hvd_stop_timeline(void);

/* As hvd_wait, but returns DEADLINE_EXCEEDED (4) when still pending after timeout_ms. */
HVD_C_EXPORT int hvd_wait_for(hvd_handle* h, int64_t timeout_ms);
/* Results of a grouped operation: one per tensor. */
HVD_C_EXPORT int hvd_handle_output_count(const hvd_handle* h);
HVD_C_EXPORT const void* hvd_handle_output_at(const hvd_handle* h, int i, size_t* bytes);
HVD_C_EXPORT int hvd_handle_output_shape_at(const hvd_handle* h, int i, int64_t* dims,
                                            int max_dims);
/* Where result i is: -1 host memory, else the CUDA device it is on (device tensors of a process
 * set that runs NCCL). A device result is freed with the handle's last reference, in order after
 * the stream its inputs named; hvd_handle_share keeps it alive for as long as a view of it lives.
 */
HVD_C_EXPORT int hvd_handle_output_device_at(const hvd_handle* h, int i);
/* A second reference to the same operation (its results included), released with hvd_release on
 * its own: for a binding whose tensors view a result without copying it. NULL for NULL. */
HVD_C_EXPORT hvd_handle* hvd_handle_share(const hvd_handle* h);
/* First-dimension rows (bytes, for byte collectives) per rank of the set: writes up to max;
 * returns how many there are. */
HVD_C_EXPORT int hvd_handle_output_splits(const hvd_handle* h, int i, int64_t* splits, int max);

/* 1 when complete, 0 when pending. */
HVD_C_EXPORT int hvd_poll(const hvd_handle* h);
/* Blocks until complete; returns its status code (message in hvd_last_error()). */
HVD_C_EXPORT int hvd_wait(hvd_handle* h);
/* Results owned by the handle (allgather, alltoall, reducescatter), valid until hvd_release. */
HVD_C_EXPORT const void* hvd_handle_output(const hvd_handle* h, size_t* bytes);
/* Writes up to max_dims dimensions; returns the number of dimensions of the output. */
HVD_C_EXPORT int hvd_handle_output_shape(const hvd_handle* h, int64_t* dims, int max_dims);
/* Releases the handle (NULL: nothing). Exactly once per handle, as free(): a handle released
 * twice, or used after its release, is undefined behaviour (checking every handle would cost
 * each operation a lookup under a lock); hvd_handle_share makes a second one to release. */
HVD_C_EXPORT void hvd_release(hvd_handle* h);

#ifdef __cplusplus
}
#endif
#endif /* HVD_C_API_H_ */
