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
// on), never against PyTorch (it takes ints: data pointers, a shape, enum values; the tensor path
// in _fastcall_tensor.cc reads tensors through their Python API) and never links libhvd.so:
// hvd.common.basics hands it the addresses of the functions it calls, from the library it loaded
// with ctypes (bind()), so there is one runtime in the process whichever way it is called. It
// releases the GIL for each call, as ctypes does. Optional: hvd.torch falls back to ctypes where
// it was not built (no Python headers) or cannot be imported.
#include "_fastcall.h"

#include <stdint.h>

#include <initializer_list>

namespace hvd_fastcall {
Runtime g_runtime;
}  // namespace hvd_fastcall

namespace {

using hvd_fastcall::g_runtime;
using hvd_fastcall::kDimsOnStack;

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
  if (!Prepare("run_allreduce", g_runtime.run_allreduce_for != nullptr, 13, ", timeout_ms, pending",
               args, nargs, &a)) {
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
  code =
      g_runtime.run_allreduce_for(a.name, &a.input, &a.output, static_cast<hvd_reduce_op_t>(a.op),
                                  a.prescale, a.postscale, a.process_set, timeout_ms, &pending);
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
  if (!Prepare("enqueue_allreduce", g_runtime.enqueue_allreduce != nullptr, 11, "", args, nargs,
               &a)) {
    return nullptr;
  }
  hvd_handle* handle;
  Py_BEGIN_ALLOW_THREADS;
  handle =
      g_runtime.enqueue_allreduce(a.name, &a.input, &a.output, static_cast<hvd_reduce_op_t>(a.op),
                                  a.prescale, a.postscale, a.process_set);
  Py_END_ALLOW_THREADS;
  return PyLong_FromVoidPtr(handle);
}

// bind(run_allreduce_for, enqueue_allreduce, wait_for, poll, wait, release): the addresses of
// the library's functions of those names (hvd_...).
PyObject* Bind(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  constexpr const char* kNames[] = {
      "run_allreduce_for", "enqueue_allreduce", "wait_for", "poll", "wait", "release"};
  constexpr Py_ssize_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  if (nargs != kCount) {
    PyErr_Format(PyExc_TypeError,
                 "hvd._fastcall.bind: takes the addresses of hvd_run_allreduce_for, "
                 "hvd_enqueue_allreduce, hvd_wait_for, hvd_poll, hvd_wait and hvd_release "
                 "(%zd), not %zd arguments",
                 kCount, nargs);
    return nullptr;
  }
  void* fn[kCount];
  for (Py_ssize_t i = 0; i < kCount; ++i) {
    if (!ToPtr(args[i], &fn[i], kNames[i])) return nullptr;
    if (fn[i] == nullptr) {
      PyErr_Format(PyExc_ValueError, "hvd._fastcall.bind: the address of hvd_%s is NULL",
                   kNames[i]);
      return nullptr;
    }
  }
  hvd_fastcall::Runtime r;
  r.run_allreduce_for = reinterpret_cast<decltype(r.run_allreduce_for)>(fn[0]);
  r.enqueue_allreduce = reinterpret_cast<decltype(r.enqueue_allreduce)>(fn[1]);
  r.wait_for = reinterpret_cast<decltype(r.wait_for)>(fn[2]);
  r.poll = reinterpret_cast<decltype(r.poll)>(fn[3]);
  r.wait = reinterpret_cast<decltype(r.wait)>(fn[4]);
  r.release = reinterpret_cast<decltype(r.release)>(fn[5]);
  g_runtime = r;
  Py_RETURN_NONE;
}

// The casts through void* are how CPython's method table holds fast-call functions.
PyMethodDef kMethods[] = {
    {"bind", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Bind)), METH_FASTCALL,
     "bind(run_allreduce_for, enqueue_allreduce, wait_for, poll, wait, release): the addresses "
     "of libhvd.so's functions"},
    {"run_allreduce", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(RunAllreduce)),
     METH_FASTCALL,
     "run_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, prescale, "
     "postscale, process_set, timeout_ms, pending) -> code; pending[0]: the handle while it runs"},
    {"enqueue_allreduce",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(EnqueueAllreduce)),
     METH_FASTCALL,
     "enqueue_allreduce(name, input_ptr, output_ptr, shape, dtype, device, stream, op, "
     "prescale, postscale, process_set) -> handle (0: none)"},
    {"configure_tensors",
     reinterpret_cast<PyCFunction>(
         reinterpret_cast<void (*)(void)>(hvd_fastcall::ConfigureTensors)),
     METH_VARARGS | METH_KEYWORDS,
     "configure_tensors(*, tensor_type, empty_like, strided, dtypes, names, encode_name, ops, "
     "average_op, no_compression, global_set, max_new_bytes, check, table, ids, "
     "from_dlpack, max_pooled): what allreduce_tensor needs of the framework "
     "(_fastcall_tensor.cc)"},
    {"allreduce_tensor",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(hvd_fastcall::AllreduceTensor)),
     METH_FASTCALL,
     "allreduce_tensor(tensor, inplace, average, name, compression, op, prescale_factor, "
     "postscale_factor, process_set) -> the result, or NotImplemented where the Python path "
     "must take the call"},
    {"output_slots", hvd_fastcall::OutputSlots, METH_NOARGS,
     "output_slots() -> the data addresses of the free output blocks kept for reuse (tests)"},
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
