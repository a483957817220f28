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
  HVD_INT64 = 7
} hvd_dtype_t;

typedef enum {
  HVD_SUM = 0,
  HVD_AVERAGE = 1,
  HVD_MIN = 2,
  HVD_MAX = 3,
  HVD_PRODUCT = 4
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
/* splits: hvd_size() entries, or NULL to divide the first dimension evenly. */
HVD_C_EXPORT hvd_handle* hvd_alltoall_async(const char* name, const void* sendbuf,
                                            hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                            const int64_t* splits);
HVD_C_EXPORT hvd_handle* hvd_reducescatter_async(const char* name, const void* sendbuf,
                                                 hvd_dtype_t dtype, int ndim, const int64_t* shape,
                                                 hvd_reduce_op_t op);
HVD_C_EXPORT int hvd_barrier(void);
HVD_C_EXPORT int hvd_join(int* last_joined_rank);

/* 1 when complete, 0 when pending. */
HVD_C_EXPORT int hvd_poll(const hvd_handle* h);
/* Blocks until complete; returns its status code (message in hvd_last_error()). */
HVD_C_EXPORT int hvd_wait(hvd_handle* h);
/* Results owned by the handle (allgather, alltoall, reducescatter), valid until hvd_release. */
HVD_C_EXPORT const void* hvd_handle_output(const hvd_handle* h, size_t* bytes);
/* Writes up to max_dims dimensions; returns the number of dimensions of the output. */
HVD_C_EXPORT int hvd_handle_output_shape(const hvd_handle* h, int64_t* dims, int max_dims);
HVD_C_EXPORT void hvd_release(hvd_handle* h);

#ifdef __cplusplus
}
#endif
#endif /* HVD_C_API_H_ */
