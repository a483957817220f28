// hvd.common._fastcall's tensor path: hvd.torch.allreduce and allreduce_ of a plain host tensor
// (the synchronous calls) done in C, from the tensor object to the result, where the Python path
// spent most of the call in bytecode.
//
// Why: a 4 KiB allreduce on two ranks takes about 2 us in C++. From Python it took 4.6 us, of
// which the collective and the call into the runtime are 2.3; the output's allocation
// (torch.empty_like) 1.0; and the Python around them (the arguments' defaults, the op, the name,
// the tensor's dtype, device, layout and contiguity, its data pointers and shape, each a few tens
// of nanoseconds in torch and as many in the interpreter) 1.2. Here the same reads cost what
// torch's getters cost and nothing around them.
//
// The plain case, taken here: a torch.Tensor (the exact type: a subclass may override anything)
// that needs no gradient, on the CPU, strided, contiguous, of a dtype hvd takes, with at most
// kDimsOnStack dimensions; op None (Average) or one of hvd's ops; no `average`; the default
// compression and process set; float scale factors; no name or a str (encoded and cached by
// hvd.torch's own function); out of place, an output below the size hvd.torch takes from its
// output pool. Anything else returns NotImplemented before touching the runtime, and the Python
// path, which handles every case and names every error, takes the call. Both paths make the same
// runtime call, so their results are the same bits; the output is made as torch.empty_like makes
// it (strides, names), over memory of ours where torch takes it (_fastcall_outputs.cc).
//
// Still nothing coupled to PyTorch's ABI: the tensor is a Python object read through its Python
// API (attributes and methods), with the objects hvd.torch hands over in configure_tensors().
//
// Ctrl-C: the runtime runs the operation for its first 100 ms (kWaitSliceMs) in this call; after
// that it waits in 100 ms slices with the GIL held in between, where a signal's handler runs
// (PyErr_CheckSignals). A handler that raises (KeyboardInterrupt) leaves the operation running,
// its buffers still written: it is parked in hvd.torch's handle table with them, under a handle
// nobody has, as the Python path parks it. No Python code runs between the wait and the parking,
// so no exception can come in between.
#include "_fastcall.h"  // first: Python.h's feature macros

#include <stdint.h>

namespace hvd_fastcall {
namespace {

// What configure_tensors() was given (owned references), and the attribute names read per call.
struct Config {
  PyObject* tensor_type = nullptr;     // torch.Tensor
  PyObject* empty_like = nullptr;      // torch.empty_like
  PyObject* strided = nullptr;         // torch.strided
  PyObject* dtypes = nullptr;          // {torch.dtype: hvd_dtype_t}
  PyObject* names = nullptr;           // hvd.torch's {str name: encoded "allreduce." name}
  PyObject* encode_name = nullptr;     // encode_name(str) -> those bytes (cached), or None
  PyObject* ops = nullptr;             // {Horovod op value: hvd_reduce_op_t}
  int average_op = 0;                  // op None
  PyObject* no_compression = nullptr;  // Compression.none
  PyObject* global_set = nullptr;      // global_process_set
  long long max_new_bytes = 0;         // out of place: outputs of fewer bytes than this
  PyObject* check = nullptr;           // hvd.common.basics.check(code): raises code's error
  PyObject* table = nullptr;           // the handle table {handle: (ptr, keep, finish)}
  PyObject* ids = nullptr;             // its handles (an iterator)
  PyObject* requires_grad = nullptr;
  PyObject* is_cpu = nullptr;
  PyObject* layout = nullptr;
  PyObject* dtype = nullptr;
  PyObject* shape = nullptr;
  PyObject* is_contiguous = nullptr;
  PyObject* data_ptr = nullptr;
  PyObject* has_names = nullptr;
  PyObject* stride = nullptr;
};

// Every reference a configuration holds, for dropping them.
void Release(Config* c) {
  PyObject** refs[] = {&c->tensor_type,   &c->empty_like,    &c->strided,  &c->dtypes,
                       &c->names,         &c->encode_name,   &c->ops,      &c->no_compression,
                       &c->global_set,    &c->check,         &c->table,    &c->ids,
                       &c->requires_grad, &c->is_cpu,        &c->layout,   &c->dtype,
                       &c->shape,         &c->is_contiguous, &c->data_ptr, &c->has_names,
                       &c->stride};
  for (PyObject** ref : refs) Py_CLEAR(*ref);
}

// Read and written with the GIL held only: a call releases it only around the runtime's calls,
// with what it needs from here held by itself.
Config g_storage;
Config* g_config = nullptr;  // &g_storage once configured

// Whether o.attr is `want`: 1 yes, 0 no, -1 an error (set).
int AttrIs(PyObject* o, PyObject* attr, PyObject* want) {
  PyObject* v = PyObject_GetAttr(o, attr);
  if (v == nullptr) return -1;
  const int is = v == want;
  Py_DECREF(v);
  return is;
}

// o.method() is `want`, as AttrIs.
int CallIs(PyObject* o, PyObject* method, PyObject* want) {
  PyObject* v = PyObject_CallMethodObjArgs(o, method, nullptr);
  if (v == nullptr) return -1;
  const int is = v == want;
  Py_DECREF(v);
  return is;
}

// o.data_ptr(); nullptr with an error set, or for an empty tensor (no error).
void* DataPtr(PyObject* o) {
  PyObject* v = PyObject_CallMethodObjArgs(o, g_config->data_ptr, nullptr);
  if (v == nullptr) return nullptr;
  void* p = PyLong_AsVoidPtr(v);
  Py_DECREF(v);
  return p;
}

// The value of a dict's entry as a C int; false when absent or not an int (no error set).
bool LookUpInt(PyObject* dict, PyObject* key, int* out) {
  PyObject* v = PyDict_GetItem(dict, key);  // borrowed; never raises
  if (v == nullptr || !PyLong_CheckExact(v)) return false;
  const long x = PyLong_AsLong(v);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}

// A synchronous allreduce's arguments once the plain case is established. The name's bytes are
// held (the cache may drop them while the GIL is released).
struct Call {
  PyObject* name = nullptr;  // bytes, or nullptr: no name
  hvd_tensor input{};
  hvd_tensor output{};
  int64_t dims[kDimsOnStack];
  int op = 0;
  double prescale = 1.0;
  double postscale = 1.0;

  Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  ~Call() { Py_XDECREF(name); }
};

// 1: the arguments other than the tensor are the plain case (filled in, but for the name: None
// or a str, read by ReadName once the tensor is known to be plain), 0: not.
int ReadOptions(PyObject* const* args, Call* c) {
  PyObject* average = args[2];
  PyObject* name = args[3];
  PyObject* op = args[5];
  if (average != Py_None || args[4] != g_config->no_compression ||
      args[8] != g_config->global_set || !PyFloat_CheckExact(args[6]) ||
      !PyFloat_CheckExact(args[7])) {
    return 0;
  }
  if (op == Py_None) {
    c->op = g_config->average_op;
  } else if (!PyLong_CheckExact(op) || !LookUpInt(g_config->ops, op, &c->op)) {
    return 0;
  }
  c->prescale = PyFloat_AsDouble(args[6]);
  c->postscale = PyFloat_AsDouble(args[7]);
  return name == Py_None || PyUnicode_CheckExact(name) ? 1 : 0;
}

// The runtime's name for `name` (None or a str: ReadOptions took it) into c->name, encoded and
// cached as the Python path does it (_handles.op_name): 1, or 0 where that failed (the Python
// path then takes the call, and raises what it raises first).
int ReadName(PyObject* name, Call* c) {
  if (name == Py_None || PyUnicode_GetLength(name) == 0) return 1;  // "": no name
  PyObject* encoded = PyDict_GetItem(g_config->names, name);        // borrowed
  if (encoded != nullptr) {
    Py_INCREF(encoded);
  } else {
    encoded = PyObject_CallFunctionObjArgs(g_config->encode_name, name, nullptr);
    if (encoded == nullptr) {  // (an unencodable str: the Python path's error, in its order)
      PyErr_Clear();
      return 0;
    }
  }
  if (!PyBytes_CheckExact(encoded)) {
    Py_DECREF(encoded);
    return 0;
  }
  c->name = encoded;  // held: the cache may drop it while the GIL is released
  return 1;
}

// 1: `t` is a plain tensor (its dtype, shape and input pointer filled in), 0: not, -1: error.
// Sets *numel, and *any_strides where a contiguous tensor's strides need not be the row-major
// ones (a dimension of size 1 may have any stride; so may every dimension of an empty tensor).
int ReadTensor(PyObject* t, Call* c, long long* numel, bool* any_strides) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(t)) != g_config->tensor_type) return 0;
  int is = AttrIs(t, g_config->requires_grad, Py_False);
  if (is == 1) is = AttrIs(t, g_config->is_cpu, Py_True);
  if (is == 1) is = AttrIs(t, g_config->layout, g_config->strided);
  if (is != 1) return is;
  PyObject* dtype = PyObject_GetAttr(t, g_config->dtype);
  if (dtype == nullptr) return -1;
  int code = 0;
  const bool known = LookUpInt(g_config->dtypes, dtype, &code);
  Py_DECREF(dtype);
  if (!known) return 0;
  if ((is = CallIs(t, g_config->is_contiguous, Py_True)) != 1) return is;
  PyObject* shape = PyObject_GetAttr(t, g_config->shape);  // a torch.Size: a tuple
  if (shape == nullptr) return -1;
  const Py_ssize_t ndim = PyTuple_Check(shape) ? PyTuple_Size(shape) : -1;
  if (ndim < 0 || ndim > kDimsOnStack) {
    Py_DECREF(shape);
    return 0;
  }
  long long n = 1;
  bool empty = false;
  *any_strides = false;
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    c->dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
    *any_strides = *any_strides || c->dims[i] <= 1;
    empty = empty || c->dims[i] == 0;
    if (__builtin_mul_overflow(n, c->dims[i], &n)) n = 0;  // (only an empty tensor's)
  }
  Py_DECREF(shape);
  if (PyErr_Occurred()) return -1;
  if (empty) n = 0;
  c->input.data = DataPtr(t);
  if (PyErr_Occurred()) return -1;
  c->input.shape = c->dims;
  c->input.ndim = static_cast<int32_t>(ndim);
  c->input.dtype = code;
  c->input.device = -1;
  c->output = c->input;
  *numel = n;
  return 1;
}

// Raises the exception for a non-zero status code, as the Python path does (basics.check). Its
// traceback starts at the caller: the frame of basics.check, where it was made, says nothing to
// a user reading which of their lines failed.
PyObject* Raise(int code) {
  PyObject* none = PyObject_CallFunction(g_config->check, "i", code);
  if (none != nullptr) {  // check raises for every code but 0: never returns here
    Py_DECREF(none);
    PyErr_Format(PyExc_RuntimeError, "hvd: status %d raised nothing", code);
    return nullptr;
  }
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  Py_XDECREF(traceback);
  if (value != nullptr && PyExceptionInstance_Check(value)) {
    PyException_SetTraceback(value, Py_None);
  }
  PyErr_Restore(type, value, nullptr);
  return nullptr;
}

// Parks a running operation and its buffers in the handle table, under a handle nobody has (as
// the Python path's _park_if_running). False when that failed (memory). REQUIRES: no exception
// set.
bool Park(hvd_handle* h, PyObject* tensor, PyObject* out) {
  PyObject* key = PyIter_Next(g_config->ids);
  if (key == nullptr) return false;
  PyObject* entry = Py_BuildValue("(N(OO)O)", PyLong_FromVoidPtr(h), tensor, out, Py_None);
  const bool parked = entry != nullptr && PyDict_SetItem(g_config->table, key, entry) == 0;
  Py_XDECREF(entry);
  Py_DECREF(key);
  return parked;
}

// Waits for an operation still running after the first slice: its status code (the handle
// released), or -1 with the exception a signal handler raised (Ctrl-C: KeyboardInterrupt). An
// interrupted operation that has not completed is parked with its buffers; where parking fails it
// is waited for first, since the buffers must outlive it.
int WaitSliced(hvd_handle* h, PyObject* tensor, PyObject* out) {
  for (;;) {
    // First: a Ctrl-C during the call's first slice is seen now, not a slice later.
    if (PyErr_CheckSignals() != 0) {
      PyObject *type, *value, *traceback;
      PyErr_Fetch(&type, &value, &traceback);
      const bool running = !g_runtime.poll(h);
      if (running && Park(h, tensor, out)) {
        PyErr_Restore(type, value, traceback);
        return -1;
      }
      PyErr_Clear();  // (parking's own error: the interrupt is what the caller sees)
      if (running) {
        Py_BEGIN_ALLOW_THREADS;
        g_runtime.wait(h);
        Py_END_ALLOW_THREADS;
      }
      g_runtime.release(h);
      PyErr_Restore(type, value, traceback);
      return -1;
    }
    int code;
    Py_BEGIN_ALLOW_THREADS;
    code = g_runtime.wait_for(h, kWaitSliceMs);
    Py_END_ALLOW_THREADS;
    if (code != kDeadlineExceeded || g_runtime.poll(h)) {
      if (code == kDeadlineExceeded) code = g_runtime.wait(h);  // complete: at once
      g_runtime.release(h);
      return code;
    }
  }
}

// Runs the call: the output (a new reference), or nullptr with an exception set.
PyObject* Run(Call* c, PyObject* tensor, PyObject* out) {
  hvd_handle* pending = nullptr;
  const char* name = c->name != nullptr ? PyBytes_AsString(c->name) : nullptr;
  int code;
  Py_BEGIN_ALLOW_THREADS;
  code =
      g_runtime.run_allreduce_for(name, &c->input, &c->output, static_cast<hvd_reduce_op_t>(c->op),
                                  c->prescale, c->postscale, 0, kWaitSliceMs, &pending);
  Py_END_ALLOW_THREADS;
  if (pending != nullptr) code = WaitSliced(pending, tensor, out);
  if (code == 0) {
    Py_INCREF(out);
    return out;
  }
  return code == -1 ? nullptr : Raise(code);
}

// MakeOutput's tensor; *data: the address of its data where it is over a block of ours, else
// nullptr.
PyObject* MakeOutputTensor(PyObject* tensor, const Call& c, long long numel, bool any_strides,
                           void** data) {
  *data = nullptr;
  // Empty (any strides), named, or a dtype torch refused through DLPack: torch's own.
  int ours = TakesOutputs(c.input.dtype) && numel > 0;
  if (ours) ours = CallIs(tensor, g_config->has_names, Py_False);
  if (ours < 0) return nullptr;
  if (!ours) return PyObject_CallFunctionObjArgs(g_config->empty_like, tensor, nullptr);
  if (!any_strides) return NewOutput(c.input, numel, nullptr, data);
  // A dimension of size 1 may have any stride in a contiguous tensor: empty_like keeps them.
  int64_t strides[kDimsOnStack];
  PyObject* given = PyObject_CallMethodObjArgs(tensor, g_config->stride, nullptr);
  if (given == nullptr) return nullptr;
  const bool read = PyTuple_Check(given) && PyTuple_Size(given) == c.input.ndim;
  for (int32_t i = 0; read && i < c.input.ndim; ++i) {
    strides[i] = PyLong_AsLongLong(PyTuple_GetItem(given, i));
  }
  Py_DECREF(given);
  if (PyErr_Occurred()) return nullptr;
  if (!read) return PyObject_CallFunctionObjArgs(g_config->empty_like, tensor, nullptr);
  return NewOutput(c.input, numel, strides, data);
}

// The new output for `tensor`: as torch.empty_like(tensor) makes it (a dense tensor's strides
// and dimension names kept), over a block of ours where NewOutput takes the dtype; its data's
// address in c->output.data. A new reference, or nullptr with an error set.
PyObject* MakeOutput(PyObject* tensor, Call* c, long long numel, bool any_strides) {
  PyObject* out = MakeOutputTensor(tensor, *c, numel, any_strides, &c->output.data);
  if (out != nullptr && c->output.data == nullptr) {  // torch's own
    c->output.data = DataPtr(out);
    if (PyErr_Occurred()) Py_CLEAR(out);
  }
  return out;
}

}  // namespace

// configure_tensors(*, tensor_type, empty_like, strided, dtypes, names, encode_name, ops,
//                   average_op, no_compression, global_set, max_new_bytes, check, table, ids,
//                   from_dlpack, max_pooled): every one required, by keyword.
PyObject* ConfigureTensors(PyObject*, PyObject* args, PyObject* kwargs) {
  static const char* kKeywords[] = {
      "tensor_type", "empty_like", "strided",        "dtypes",     "names",         "encode_name",
      "ops",         "average_op", "no_compression", "global_set", "max_new_bytes", "check",
      "table",       "ids",        "from_dlpack",    "max_pooled", nullptr};
  constexpr int kCount = sizeof(kKeywords) / sizeof(kKeywords[0]) - 1;
  PyObject* v[kCount] = {};
  // (Keyword-only arguments must be optional to PyArg_ParseTupleAndKeywords: checked below.)
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOOOOOOOOOO",
                                   const_cast<char**>(kKeywords), &v[0], &v[1], &v[2], &v[3], &v[4],
                                   &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12],
                                   &v[13], &v[14], &v[15])) {
    return nullptr;
  }
  for (int i = 0; i < kCount; ++i) {
    if (v[i] == nullptr) {
      PyErr_Format(PyExc_TypeError, "hvd._fastcall.configure_tensors: %s= is missing",
                   kKeywords[i]);
      return nullptr;
    }
  }
  if (!PyDict_Check(v[3]) || !PyDict_Check(v[4]) || !PyDict_Check(v[6]) || !PyDict_Check(v[12]) ||
      !PyCallable_Check(v[1]) || !PyCallable_Check(v[5]) || !PyCallable_Check(v[11]) ||
      !PyIter_Check(v[13]) || (v[14] != Py_None && !PyCallable_Check(v[14]))) {
    PyErr_SetString(PyExc_TypeError,
                    "hvd._fastcall.configure_tensors: dtypes, names, ops and table must be dicts, "
                    "empty_like, encode_name and check callables, ids an iterator, "
                    "from_dlpack a callable or None");
    return nullptr;
  }
  const long average_op = PyLong_AsLong(v[7]);
  const long long max_new_bytes = PyLong_AsLongLong(v[10]);
  const long long max_pooled = PyLong_AsLongLong(v[15]);
  if (PyErr_Occurred()) return nullptr;
  Config next;
  next.average_op = static_cast<int>(average_op);
  next.max_new_bytes = max_new_bytes;
  PyObject** objects[] = {&next.tensor_type,    &next.empty_like,  &next.strided, &next.dtypes,
                          &next.names,          &next.encode_name, &next.ops,     nullptr,
                          &next.no_compression, &next.global_set,  nullptr,       &next.check,
                          &next.table,          &next.ids};
  for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); ++i) {
    if (objects[i] == nullptr) continue;
    Py_INCREF(v[i]);
    *objects[i] = v[i];
  }
  const char* attrs[] = {"requires_grad", "is_cpu",   "layout",    "dtype", "shape",
                         "is_contiguous", "data_ptr", "has_names", "stride"};
  PyObject** attr_slots[] = {&next.requires_grad, &next.is_cpu,    &next.layout,
                             &next.dtype,         &next.shape,     &next.is_contiguous,
                             &next.data_ptr,      &next.has_names, &next.stride};
  bool ok = true;
  for (size_t i = 0; ok && i < sizeof(attrs) / sizeof(attrs[0]); ++i) {
    *attr_slots[i] = PyUnicode_InternFromString(attrs[i]);
    ok = *attr_slots[i] != nullptr;
  }
  if (!ok || !ConfigureOutputs(v[14], v[3], max_pooled)) {
    Release(&next);  // the configuration before stays
    return nullptr;
  }
  // A reconfiguration (a reloaded hvd.torch) drops the previous objects: every reader holds the
  // GIL, and a call in the runtime holds what it uses itself.
  Config old = g_storage;
  g_storage = next;
  g_config = &g_storage;
  Release(&old);
  Py_RETURN_NONE;
}

// allreduce_tensor(tensor, inplace, average, name, compression, op, prescale_factor,
//                  postscale_factor, process_set): hvd.torch.allreduce's arguments (inplace:
// allreduce_) -> the result, or NotImplemented (the Python path takes the call).
PyObject* AllreduceTensor(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError,
                 "hvd._fastcall.allreduce_tensor: takes 9 arguments (tensor, inplace, average, "
                 "name, compression, op, prescale_factor, postscale_factor, process_set), not %zd",
                 nargs);
    return nullptr;
  }
  if (g_config == nullptr || g_runtime.run_allreduce_for == nullptr) {
    PyErr_SetString(PyExc_RuntimeError,
                    "hvd._fastcall.allreduce_tensor: bind() and configure_tensors() come first");
    return nullptr;
  }
  Call c;
  int plain = ReadOptions(args, &c);
  PyObject* tensor = args[0];
  long long numel = 0;
  bool any_strides = false;
  if (plain == 1) plain = ReadTensor(tensor, &c, &numel, &any_strides);
  if (plain != 1) {
    if (plain == 0) Py_RETURN_NOTIMPLEMENTED;
    return nullptr;
  }
  const int inplace = PyObject_IsTrue(args[1]);
  if (inplace < 0) return nullptr;
  // Out of place, an output the Python path takes from its pool (4 MiB and more) is its call.
  if ((!inplace && numel * ItemSize(c.input.dtype) >= g_config->max_new_bytes) ||
      !ReadName(args[3], &c)) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  if (inplace) return Run(&c, tensor, tensor);
  PyObject* out = MakeOutput(tensor, &c, numel, any_strides);
  if (out == nullptr) return nullptr;
  PyObject* result = Run(&c, tensor, out);
  Py_DECREF(out);
  return result;
}

}  // namespace hvd_fastcall
