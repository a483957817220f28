// hvd.common._fastcall: the allreduce entry points of libhvd.so's C ABI, callable from Python for
// a fraction of what a ctypes call costs.
//
// Why it exists: a synchronous 4 KiB allreduce is a few microseconds, and a ctypes call of
// hvd_run_allreduce_for (nine arguments, three of them ctypes objects made per call) costs about
// 0.8 us of it; a METH_FASTCALL function that takes plain ints costs about 0.1 us. Every gradient
// of a training step goes through these two calls.
//
// Why it breaks nothing that ctypes avoids (python/README.md, "Why ctypes"): it is compiled
// against CPython's stable ABI (Py_LIMITED_API, 3.10: one build serves every CPython from 3.10
// on), never against PyTorch (it takes ints: data pointers, a shape, enum values) and never
// links libhvd.so: hvd.common.basics hands it the addresses of the two functions from the library
// it loaded with ctypes (bind()), so there is one runtime in the process whichever way it is
// called. It releases the GIL for each call, as ctypes does. Optional: hvd.torch falls back to
// ctypes where it was not built (no Python headers) or cannot be imported.
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include <stdint.h>

#include <initializer_list>

#include "hvd/c_api.h"

namespace {

using RunFn = decltype(&hvd_run_allreduce_for);  // c_api.h's types: nothing to link
using EnqueueFn = decltype(&hvd_enqueue_allreduce);

RunFn g_run = nullptr;
EnqueueFn g_enqueue = nullptr;

constexpr int kDimsOnStack = 16;  // more dimensions than this: dims on the heap

// The arguments both calls share, converted from Python objects. Returns false with a Python
// exception set.
struct AllreduceArgs {
  const char* name = nullptr;
  hvd_tensor input{};
  hvd_tensor output{};
  int64_t stack_dims[kDimsOnStack];
  int64_t* heap_dims = nullptr;  // PyMem_Malloc'd (freed with the GIL held, on return)
  int op = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  int process_set = 0;

  AllreduceArgs() = default;
  AllreduceArgs(const AllreduceArgs&) = delete;
  AllreduceArgs& operator=(const AllreduceArgs&) = delete;
  ~AllreduceArgs() { PyMem_Free(heap_dims); }
};

constexpr const char* kArgs =
    "(name, input_ptr, output_ptr, shape, dtype, device, stream, op, prescale, postscale, "
    "process_set";

bool ToInt(PyObject* o, int* out, const char* what) {
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred()) return false;
  if (v < INT32_MIN || v > INT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "hvd._fastcall: %s=%ld does not fit a C int", what, v);
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool ToPtr(PyObject* o, void** out, const char* what) {
  if (o == Py_None) {
    *out = nullptr;
    return true;
  }
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "hvd._fastcall: %s must be an int address or None", what);
    return false;
  }
  *out = PyLong_AsVoidPtr(o);
  return !(*out == nullptr && PyErr_Occurred());
}

bool Parse(PyObject* const* args, AllreduceArgs* a) {
  PyObject* name = args[0];
  if (name != Py_None) {
    if (!PyBytes_Check(name)) {
      PyErr_SetString(PyExc_TypeError, "hvd._fastcall: name must be bytes or None");
      return false;
    }
    a->name = PyBytes_AsString(name);
    if (a->name == nullptr) return false;
  }
  PyObject* shape = args[3];
  if (!PyTuple_Check(shape)) {  // tensor.shape: a torch.Size, a tuple
    PyErr_SetString(PyExc_TypeError, "hvd._fastcall: shape must be a tuple (tensor.shape)");
    return false;
  }
  Py_ssize_t ndim = PyTuple_Size(shape);
  if (ndim > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "hvd._fastcall: a shape of %zd dimensions", ndim);
    return false;
  }
  int64_t* dims = a->stack_dims;
  if (ndim > kDimsOnStack) {
    a->heap_dims = static_cast<int64_t*>(PyMem_Malloc(sizeof(int64_t) * ndim));
    if (a->heap_dims == nullptr) {
      PyErr_NoMemory();
      return false;
    }
    dims = a->heap_dims;
  }
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));  // borrowed
    if (dims[i] == -1 && PyErr_Occurred()) return false;
  }
  int dtype = 0, device = 0;
  void* stream = nullptr;
  if (!ToPtr(args[1], &a->input.data, "input_ptr") ||
      !ToPtr(args[2], &a->output.data, "output_ptr") || !ToInt(args[4], &dtype, "dtype") ||
      !ToInt(args[5], &device, "device") || !ToPtr(args[6], &stream, "stream") ||
      !ToInt(args[7], &a->op, "op") || !ToInt(args[10], &a->process_set, "process_set")) {
    return false;
  }
  a->prescale = PyFloat_AsDouble(args[8]);
  if (a->prescale == -1.0 && PyErr_Occurred()) return false;
  a->postscale = PyFloat_AsDouble(args[9]);
  if (a->postscale == -1.0 && PyErr_Occurred()) return false;
  for (hvd_tensor* t : {&a->input, &a->output}) {
    t->shape = dims;
    t->ndim = static_cast<int32_t>(ndim);
    t->dtype = dtype;
    t->device = device;
    t->stream = stream;
  }
  return true;
}

// The checks both calls make first: the argument count (`extra`: the arguments after
// process_set), bind() done, the shared arguments converted.
bool Prepare(const char* fn, bool bound, Py_ssize_t want, const char* extra, PyObject* const* args,
             Py_ssize_t nargs, AllreduceArgs* a) {
  if (nargs != want) {
    PyErr_Format(PyExc_TypeError, "hvd._fastcall.%s: takes %zd arguments %s%s), not %zd", fn, want,
                 kArgs, extra, nargs);
    return false;
  }
  if (!bound) {
    PyErr_Format(PyExc_RuntimeError, "hvd._fastcall.%s: bind() was not called", fn);
    return false;
  }
  return Parse(args, a);
}

// run_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, prescale,
//               postscale, process_set, timeout_ms, pending)
// hvd_run_allreduce_for: the status code (0: done). While the operation still runs after
// timeout_ms, its handle is stored in pending[0] (a list) before this returns: a KeyboardInterrupt
// raised as the call returns (a Ctrl-C during it) loses the return value, not the handle, and the
// caller must keep the operation's buffers until it completes.
PyObject* RunAllreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  AllreduceArgs a;
  if (!Prepare("run_allreduce", g_run != nullptr, 13, ", timeout_ms, pending", args, nargs, &a)) {
    return nullptr;
  }
  long long timeout_ms = PyLong_AsLongLong(args[11]);
  if (timeout_ms == -1 && PyErr_Occurred()) return nullptr;
  PyObject* slot = args[12];
  if (!PyList_Check(slot) || PyList_Size(slot) < 1) {
    PyErr_SetString(PyExc_TypeError, "hvd._fastcall.run_allreduce: pending must be a list [0]");
    return nullptr;
  }
  hvd_handle* pending = nullptr;
  int code;
  Py_BEGIN_ALLOW_THREADS;
  code = g_run(a.name, &a.input, &a.output, static_cast<hvd_reduce_op_t>(a.op), a.prescale,
               a.postscale, a.process_set, timeout_ms, &pending);
  Py_END_ALLOW_THREADS;
  if (pending != nullptr) {
    // Only memory exhaustion makes this fail; the handle is then lost with a MemoryError.
    PyObject* handle = PyLong_FromVoidPtr(pending);
    if (handle == nullptr || PyList_SetItem(slot, 0, handle) != 0) return nullptr;  // steals
  }
  return PyLong_FromLong(code);
}

// enqueue_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, prescale,
//                   postscale, process_set)
// hvd_enqueue_allreduce: the handle (an int; 0 when the runtime made none).
PyObject* EnqueueAllreduce(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  AllreduceArgs a;
  if (!Prepare("enqueue_allreduce", g_enqueue != nullptr, 11, "", args, nargs, &a)) {
    return nullptr;
  }
  hvd_handle* handle;
  Py_BEGIN_ALLOW_THREADS;
  handle = g_enqueue(a.name, &a.input, &a.output, static_cast<hvd_reduce_op_t>(a.op), a.prescale,
                     a.postscale, a.process_set);
  Py_END_ALLOW_THREADS;
  return PyLong_FromVoidPtr(handle);
}

// bind(run_allreduce_for_address, enqueue_allreduce_address): the library's functions.
PyObject* Bind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError,
                    "hvd._fastcall.bind: takes (run_allreduce_for_address, "
                    "enqueue_allreduce_address)");
    return nullptr;
  }
  void* run = nullptr;
  void* enqueue = nullptr;
  if (!ToPtr(args[0], &run, "run_allreduce_for_address") ||
      !ToPtr(args[1], &enqueue, "enqueue_allreduce_address")) {
    return nullptr;
  }
  if (run == nullptr || enqueue == nullptr) {
    PyErr_SetString(PyExc_ValueError, "hvd._fastcall.bind: a function address is NULL");
    return nullptr;
  }
  g_run = reinterpret_cast<RunFn>(run);
  g_enqueue = reinterpret_cast<EnqueueFn>(enqueue);
  Py_RETURN_NONE;
}

// The casts through void* are how CPython's method table holds fast-call functions.
PyMethodDef kMethods[] = {
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Bind)), METH_FASTCALL,
     "bind(run_allreduce_for_address, enqueue_allreduce_address)"},
    {"run_allreduce", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(RunAllreduce)),
     METH_FASTCALL,
     "run_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, prescale, "
     "postscale, process_set, timeout_ms, pending) -> code; pending[0]: the handle while it runs"},
    {"enqueue_allreduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(EnqueueAllreduce)),
     METH_FASTCALL,
     "enqueue_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, "
     "prescale, postscale, process_set) -> handle (0: none)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                       "_fastcall",
                       "libhvd.so's allreduce calls without ctypes (see the source's header).",
                       -1,
                       kMethods,
                       nullptr,
                       nullptr,
                       nullptr,
                       nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__fastcall(void) {
  return PyModule_Create(&kModule);
}
