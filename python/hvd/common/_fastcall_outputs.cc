// hvd.common._fastcall's outputs: the new tensor an out-of-place allreduce returns, made over
// memory this module allocates and hands to torch through DLPack, and takes back when torch frees
// the tensor's storage.
//
// Why: torch.empty_like is the cheapest way Python has to make a 4 KiB tensor (0.75 us in a
// tight loop), but between two allreduces it costs 1.3-1.4 us (the allocator's and dispatcher's
// code and data are cold after the runtime has run), 60% of the C++ operation itself. A DLPack
// capsule over a block of ours costs torch 0.3 us to wrap (torch._C._from_dlpack: a storage with
// our deleter, a tensor, its Python object), and the block comes from a few slots of blocks freed
// before, not from malloc. Measured from Python on two ranks: 4 KiB out of place 3.9 -> 3.2 us.
//
// Vocabulary: a block is one allocation: the DLManagedTensor torch is given, its shape and
// strides, then the data (64-byte aligned, as torch's own CPU allocator aligns). A slot holds one
// free block or nothing; kSlots of them, each taken and filled with one atomic exchange, so the
// deleter (called wherever torch drops the storage's last reference: any thread, with or without
// the GIL, or in a forked child) never blocks and never allocates. A block freed when every slot
// is full takes the next slot in turn, whose block is freed: the sizes freed last stay. Blocks of
// more than max_pooled bytes are never kept, so the slots hold at most kSlots * max_pooled bytes.
//
// DLPack is a published C ABI (the "dltensor" capsule of DLPack 0.x, which torch reads since 1.x
// and still reads); it couples this module to that ABI, not to torch's. What torch accepts is
// probed once per dtype in ConfigureOutputs: a dtype it refuses (bool in torch 1.13) keeps
// torch.empty_like, as does every dtype where torch has no _from_dlpack.
//
// The tensors are ordinary CPU tensors with one difference, the same as the output pool's in
// hvd/torch/_output_pool.py: their storage cannot grow (resize_ to more elements than they have
// fails with "Trying to resize storage that is not resizable").
#include "_fastcall.h"  // first: Python.h's feature macros

#include <stdint.h>
#include <stdlib.h>

#include <atomic>

namespace hvd_fastcall {
namespace {

// DLPack 0.x's structures, as its specification lays them out.
struct DLDevice {
  int32_t device_type;  // kDLCPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLBool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};
constexpr int32_t kDLCPU = 1;
constexpr uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6;
constexpr const char* kCapsuleName = "dltensor";  // torch renames it "used_dltensor" once taken

// hvd_dtype_t (c_api.h) -> DLPack's type.
constexpr DLDataType kTypes[] = {
    {kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLFloat, 16, 1}, {kDLBfloat, 16, 1}, {kDLInt, 8, 1},
    {kDLUInt, 8, 1},   {kDLInt, 32, 1},   {kDLInt, 64, 1},   {kDLInt, 16, 1},    {kDLBool, 8, 1}};
constexpr int kTypeCount = sizeof(kTypes) / sizeof(kTypes[0]);

struct Block {
  DLManagedTensor managed;  // first: the deleter's pointer is the block's
  size_t bytes;             // the whole allocation
  int64_t shape[kDimsOnStack];
  int64_t strides[kDimsOnStack];
};
constexpr size_t kAlign = 64;
constexpr size_t kHeader = (sizeof(Block) + kAlign - 1) / kAlign * kAlign;  // then the data

constexpr int kSlots = 16;
std::atomic<Block*> g_slots[kSlots];
std::atomic<size_t> g_max_pooled{0};  // 0: nothing kept
std::atomic<unsigned> g_next_victim{0};

// Read with the GIL held only.
PyObject* g_from_dlpack = nullptr;  // torch._C._from_dlpack, or nullptr: torch.empty_like
bool g_takes[kTypeCount] = {};      // which dtypes torch took in the probe

// A free block of `bytes` from the slots, or nullptr. A block of another size taken on the way
// goes back (or is freed when its slot filled meanwhile).
Block* Take(size_t bytes) {
  for (std::atomic<Block*>& slot : g_slots) {
    if (slot.load(std::memory_order_relaxed) == nullptr) continue;
    Block* b = slot.exchange(nullptr, std::memory_order_acquire);
    if (b == nullptr) continue;
    if (b->bytes == bytes) return b;
    Block* expected = nullptr;
    if (!slot.compare_exchange_strong(expected, b, std::memory_order_release)) free(b);
  }
  return nullptr;
}

// DLPack's deleter: the block back into an empty slot; when every slot is full, into the next
// one in turn, whose block is freed (the sizes freed last stay: those a loop makes again).
void GiveBack(DLManagedTensor* managed) {
  Block* b = reinterpret_cast<Block*>(managed);
  if (b->bytes - kHeader > g_max_pooled.load(std::memory_order_relaxed)) {
    free(b);
    return;
  }
  for (std::atomic<Block*>& slot : g_slots) {
    Block* expected = nullptr;
    if (slot.compare_exchange_strong(expected, b, std::memory_order_release)) return;
  }
  const unsigned victim = g_next_victim.fetch_add(1, std::memory_order_relaxed) % kSlots;
  free(g_slots[victim].exchange(b, std::memory_order_acq_rel));  // (nullptr: nothing)
}

// A capsule torch never took (its call failed) still owns its block.
void DropCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, kCapsuleName)) return;  // taken: torch owns the block
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  managed->deleter(managed);
}

// A dense tensor of `ndim` dims and `type` over a block (row-major, or `strides` where given: a
// permutation of them that covers the same numel elements), made by from_dlpack: a new
// reference, or nullptr with an error set. *data: the block's data, where the tensor's begins.
PyObject* Wrap(PyObject* from_dlpack, int32_t ndim, const int64_t* dims, const int64_t* strides,
               int type, long long numel, void** data) {
  const size_t bytes = kHeader + static_cast<size_t>(numel) * (kTypes[type].bits / 8);
  Block* b = Take(bytes);
  if (b == nullptr) {
    void* memory = nullptr;
    if (posix_memalign(&memory, kAlign, bytes) != 0) return PyErr_NoMemory();
    b = static_cast<Block*>(memory);
    b->bytes = bytes;
  }
  DLTensor& t = b->managed.dl_tensor;
  t.data = reinterpret_cast<char*>(b) + kHeader;
  *data = t.data;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = kTypes[type];
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    b->shape[i] = dims[i];
    b->strides[i] = strides != nullptr ? strides[i] : stride;
    stride *= dims[i] > 0 ? dims[i] : 1;
  }
  t.shape = b->shape;
  t.strides = b->strides;
  t.byte_offset = 0;
  b->managed.manager_ctx = nullptr;
  b->managed.deleter = GiveBack;
  PyObject* capsule = PyCapsule_New(&b->managed, kCapsuleName, DropCapsule);
  if (capsule == nullptr) {
    free(b);
    return nullptr;
  }
  PyObject* tensor = PyObject_CallFunctionObjArgs(from_dlpack, capsule, nullptr);
  // Taken: torch's from now on; else DropCapsule gives the block back. (torch renames the capsule
  // only once its tensor exists, so a failure in between, memory only, would give it back twice.)
  Py_DECREF(capsule);
  return tensor;
}

}  // namespace

bool ConfigureOutputs(PyObject* from_dlpack, PyObject* dtypes, long long max_pooled) {
  // The probe, before anything changes: a tensor of 3 elements of each dtype, which torch must
  // take as that dtype. (A copy of the items: the calls into torch could change the dict.)
  bool takes[kTypeCount] = {};
  PyObject* items = from_dlpack == Py_None ? nullptr : PyDict_Items(dtypes);
  if (from_dlpack != Py_None && items == nullptr) return false;
  for (Py_ssize_t i = 0; items != nullptr && i < PyList_Size(items); ++i) {
    PyObject* item = PyList_GetItem(items, i);  // (dtype, hvd_dtype_t)
    const long type = PyLong_AsLong(PyTuple_GetItem(item, 1));
    if (type < 0 || type >= kTypeCount) {
      if (PyErr_Occurred()) break;
      continue;
    }
    const int64_t dims[1] = {3};
    void* data = nullptr;
    PyObject* probe = Wrap(from_dlpack, 1, dims, nullptr, static_cast<int>(type), 3, &data);
    PyObject* dtype = probe != nullptr ? PyObject_GetAttrString(probe, "dtype") : nullptr;
    PyObject* numel = dtype != nullptr ? PyObject_CallMethod(probe, "numel", nullptr) : nullptr;
    // The tensor's data where the capsule put it: NewOutput's callers take that address for the
    // output's without asking the tensor (a call into torch per operation saved).
    PyObject* at = numel != nullptr ? PyObject_CallMethod(probe, "data_ptr", nullptr) : nullptr;
    takes[type] = at != nullptr && dtype == PyTuple_GetItem(item, 0) && PyLong_AsLong(numel) == 3 &&
                  PyLong_AsVoidPtr(at) == data;
    Py_XDECREF(at);
    Py_XDECREF(numel);
    Py_XDECREF(dtype);
    Py_XDECREF(probe);
    // Refused (bool in torch 1.13): that dtype keeps torch.empty_like. Not so an interrupt.
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) break;
    PyErr_Clear();
  }
  Py_XDECREF(items);
  if (PyErr_Occurred()) return false;
  // Committed.
  Py_XINCREF(from_dlpack == Py_None ? nullptr : from_dlpack);
  PyObject* previous = g_from_dlpack;
  g_from_dlpack = from_dlpack == Py_None ? nullptr : from_dlpack;
  Py_XDECREF(previous);
  for (int t = 0; t < kTypeCount; ++t) g_takes[t] = takes[t];
  g_max_pooled.store(g_from_dlpack != nullptr && max_pooled > 0 ? max_pooled : 0);
  // The slots start empty: no probe's block, nothing kept of a size limit that changed.
  for (std::atomic<Block*>& slot : g_slots) free(slot.exchange(nullptr));
  return true;
}

PyObject* OutputSlots(PyObject*, PyObject*) {
  PyObject* free_blocks = PyList_New(0);
  if (free_blocks == nullptr) return nullptr;
  for (std::atomic<Block*>& slot : g_slots) {
    Block* b = slot.load(std::memory_order_acquire);  // (a snapshot: for tests)
    if (b == nullptr) continue;
    PyObject* data = PyLong_FromVoidPtr(reinterpret_cast<char*>(b) + kHeader);
    if (data == nullptr || PyList_Append(free_blocks, data) != 0) {
      Py_XDECREF(data);
      Py_DECREF(free_blocks);
      return nullptr;
    }
    Py_DECREF(data);
  }
  return free_blocks;
}

long long ItemSize(int type) {
  return type >= 0 && type < kTypeCount ? kTypes[type].bits / 8 : 0;
}

bool TakesOutputs(int type) {
  return g_from_dlpack != nullptr && type >= 0 && type < kTypeCount && g_takes[type];
}

PyObject* NewOutput(const hvd_tensor& like, long long numel, const int64_t* strides, void** data) {
  return Wrap(g_from_dlpack, like.ndim, like.shape, strides, like.dtype, numel, data);
}

}  // namespace hvd_fastcall
