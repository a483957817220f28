// hvd.common._fastcall's shared parts: libhvd.so's functions (bound once by bind()) and the
// tensor path's entry points (_fastcall_tensor.cc), for the module table in _fastcall.cc.
#ifndef HVD_PYTHON_FASTCALL_H_
#define HVD_PYTHON_FASTCALL_H_

#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include "hvd/c_api.h"

namespace hvd_fastcall {

// c_api.h's functions, from the library hvd.common.basics loaded with ctypes (nothing linked).
struct Runtime {
  decltype(&hvd_run_allreduce_for) run_allreduce_for = nullptr;
  decltype(&hvd_enqueue_allreduce) enqueue_allreduce = nullptr;
  decltype(&hvd_wait_for) wait_for = nullptr;
  decltype(&hvd_poll) poll = nullptr;
  decltype(&hvd_wait) wait = nullptr;
  decltype(&hvd_release) release = nullptr;
};
extern Runtime g_runtime;

constexpr int kDimsOnStack = 16;  // more dimensions than this: on the heap, or the Python path

// hvd_wait_for's slice: a wait this long returns to Python, which sees Ctrl-C in between.
constexpr int64_t kWaitSliceMs = 100;
// hvd_wait_for's status while the operation still runs (hvd::StatusCode's DEADLINE_EXCEEDED).
constexpr int kDeadlineExceeded = 4;

// configure_tensors(**objects) and allreduce_tensor(...): see _fastcall_tensor.cc.
PyObject* ConfigureTensors(PyObject* module, PyObject* args, PyObject* kwargs);
PyObject* AllreduceTensor(PyObject* module, PyObject* const* args, Py_ssize_t nargs);

// New output tensors over blocks of this module's (_fastcall_outputs.cc). With the GIL held.
// Where torch takes DLPack capsules (from_dlpack: torch._C._from_dlpack, or None), probes which
// of `dtypes` ({torch.dtype: hvd_dtype_t}) it takes; blocks of up to max_pooled bytes of data are
// kept for reuse once torch frees them (0: none). False with an error set (an interrupt during
// the probe), nothing changed.
bool ConfigureOutputs(PyObject* from_dlpack, PyObject* dtypes, long long max_pooled);
// output_slots() -> [the data address of each free block in the slots]: for tests.
PyObject* OutputSlots(PyObject* module, PyObject* unused);
// The bytes of an element of hvd_dtype_t `type` (0 for an unknown type).
long long ItemSize(int type);
// Whether NewOutput makes tensors of hvd_dtype_t `type`.
bool TakesOutputs(int type);
// A new dense tensor shaped and typed as `like` (numel elements), row-major or with `strides`
// (like's own, of a contiguous tensor), or nullptr with an error set. *data: its data's address
// (checked against data_ptr() in the probe of each dtype).
// REQUIRES: TakesOutputs(like.dtype), like.ndim <= kDimsOnStack.
PyObject* NewOutput(const hvd_tensor& like, long long numel, const int64_t* strides, void** data);

}  // namespace hvd_fastcall

#endif  // HVD_PYTHON_FASTCALL_H_
