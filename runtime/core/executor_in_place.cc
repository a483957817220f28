// Tensor fusion without copying the large tensors: a batch whose large items stay where they
// lie (BatchItem::in_place, fusion/fusion_planner.h) runs as one allreduce over a virtual buffer
// (collectives::Extent) where rings run it (collectives::ExtentsTake: the flat ring, or the
// hierarchical allreduce's rings within and across hosts). Its layout is the fusion buffer's,
// part-major over every item of the batch in batch order (fusion/fusion_buffer.h), so an element is
// reduced in the same part, and so the same order, as fused or alone: the results are bit-identical
// to both. The small items lie packed in the fusion buffer; each large one's piece of part s is its
// own memory.
//
// Why: across hosts a collective costs at least a few one-way delays however small it is, and a
// copy of a large tensor in and out of the fusion buffer costs more than the collective it saves
// on shared memory; one ring over both pays neither (docs/performance-fusion.md, "Tensor fusion across
// delayed links").
//
// Where ranks differ: a joined rank packs the identity for the items it does not hold, and a
// rank packs in-place items whose output overlaps another item's memory (one tensor submitted
// twice): the virtual buffer is the same on every rank, only where its bytes lie differs.
#include <algorithm>
#include <cstring>
#include <utility>

#include "collectives/collectives.h"
#include "core/executor.h"
#include "fusion/fusion_buffer.h"

namespace hvd::runtime::core {

using negotiation::Response;
using negotiation::TensorSpec;

namespace {

// Appends extent [at, ...) at `data` (input `in`), merged into the last one where both continue
// it in memory.
void Append(std::vector<collectives::Extent>* extents, size_t at, char* data, const char* in,
            size_t es) {
  if (!extents->empty()) {
    const collectives::Extent& last = extents->back();
    const size_t len = (at - last.begin) * es;
    const bool in_follows =
        last.in == nullptr ? in == nullptr : in != nullptr && last.in + len == in;
    if (last.data + len == data && in_follows) return;
  }
  extents->push_back({at, data, in});
}

// Marks in-place items whose output overlaps another item's output or input as packed: one ring
// over both would read bytes another part of it already wrote (inputs only read may share
// memory). Pairwise: a batch holds tens of large tensors, and a collective costs far more.
void PackOverlapping(const std::vector<BatchRef>& items, std::vector<bool>* packed) {
  struct Range {
    const char* begin;
    const char* end;
    size_t item;
    bool output;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < items.size(); ++i) {
    if ((*packed)[i]) continue;
    const TensorSpec& spec = items[i].response->tensors[items[i].tensor];
    const size_t bytes = static_cast<size_t>(spec.num_elements()) * DataTypeSize(spec.dtype);
    const char* out = static_cast<const char*>(items[i].op->outputs[items[i].tensor].data);
    const char* in = static_cast<const char*>(items[i].op->inputs[items[i].tensor].data);
    if (bytes == 0) continue;
    ranges.push_back({out, out + bytes, i, true});
    if (in != out) ranges.push_back({in, in + bytes, i, false});
  }
  for (size_t a = 0; a < ranges.size(); ++a) {
    for (size_t b = a + 1; b < ranges.size(); ++b) {
      if (ranges[a].item != ranges[b].item && (ranges[a].output || ranges[b].output) &&
          ranges[a].begin < ranges[b].end && ranges[b].begin < ranges[a].end) {
        (*packed)[ranges[a].item] = true;
        (*packed)[ranges[b].item] = true;
      }
    }
  }
}

}  // namespace

Status Executor::RunAllreduceInPlace(const collectives::Comm& comm,
                                     const std::vector<BatchRef>& items, int contributors) {
  const Response& head = *items[0].response;
  const DataType dtype = head.tensors[items[0].tensor].dtype;
  const size_t es = DataTypeSize(dtype);

  std::vector<std::vector<size_t>> pieces(items.size());
  std::vector<bool> packed(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const TensorSpec& spec = items[i].response->tensors[items[i].tensor];
    pieces[i] = collectives::AllreduceLayout(comm, static_cast<size_t>(spec.num_elements()));
    packed[i] = !items[i].in_place || items[i].op == nullptr;
  }
  PackOverlapping(items, &packed);
  const int nparts = static_cast<int>(pieces[0].size()) - 1;  // every item has the comm's parts

  std::vector<std::vector<size_t>> packed_pieces;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!packed[i]) continue;
    const BatchRef& b = items[i];
    packed_pieces.push_back(pieces[i]);
    inputs.push_back(b.op != nullptr ? b.op->inputs[b.tensor].data : nullptr);
    outputs.push_back(b.op != nullptr ? b.op->outputs[b.tensor].data : nullptr);
  }
  const bool any_packed = !packed_pieces.empty();
  const fusion::BufferLayout layout(std::move(packed_pieces), es);
  if (fusion_buffer_.size() < layout.bytes()) fusion_buffer_.resize(layout.bytes());
  char* buf = fusion_buffer_.data();
  if (timeline_) {
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].response->tensors[items[i].tensor].name;
      if (packed[i]) timeline_->ActivityStart(name, "MEMCPY_IN_FUSION_BUFFER");
    }
  }
  layout.Pack(inputs, dtype, head.reduce_op, head.prescale, buf);

  // The virtual buffer part by part, each item's piece in batch order (as on every rank).
  std::vector<const char*> reads(items.size(), nullptr);  // in-place items' inputs, if read
  for (size_t i = 0; i < items.size(); ++i) {
    if (!packed[i]) reads[i] = static_cast<const char*>(PrepareInPlace(items[i]));
  }
  std::vector<size_t> cursor(nparts, 0);  // where the packed items' next piece goes, by part
  if (any_packed) std::copy(layout.parts().begin(), layout.parts().end() - 1, cursor.begin());
  std::vector<size_t> parts(nparts + 1, 0);
  std::vector<collectives::Extent> extents;
  size_t at = 0;
  for (int s = 0; s < nparts; ++s) {
    for (size_t i = 0; i < items.size(); ++i) {
      const size_t from = pieces[i][s], len = pieces[i][s + 1] - from;
      if (len == 0) continue;
      if (packed[i]) {
        Append(&extents, at, buf + cursor[s] * es, nullptr, es);
        cursor[s] += len;
      } else {
        char* out = static_cast<char*>(items[i].op->outputs[items[i].tensor].data);
        Append(&extents, at, out + from * es, reads[i] != nullptr ? reads[i] + from * es : nullptr,
               es);
      }
      at += len;
    }
    parts[s + 1] = at;
  }

  TimelineAllreduceStart(comm, items, at * es);
  allreduce_collectives_.fetch_add(1);
  Status s = collectives::AllreduceExtents(comm, extents, parts, dtype, WireOp(head.reduce_op),
                                           PostFactor(head, contributors));
  if (!s.ok()) return s.WithContext("allreduce of '" + head.key + "'");
  if (timeline_) {
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string& name = items[i].response->tensors[items[i].tensor].name;
      if (packed[i]) timeline_->ActivityStart(name, "MEMCPY_OUT_FUSION_BUFFER");
    }
  }
  layout.Unpack(buf, outputs);
  return Status::OK();
}

}  // namespace hvd::runtime::core
