// Local gradient aggregation (Horovod's backward_passes_per_step): sum locally, allreduce once.
#include <cstring>

#include "collectives/reduce.h"
#include "core/operation.h"
#include "hvd/hvd.h"

namespace hvd {

struct LocalGradientAggregator::Accumulator {
  std::string name;
  DataType dtype;
  std::vector<int64_t> shape;
  std::vector<char> sum;
  int passes = 0;
};

LocalGradientAggregator::LocalGradientAggregator(int passes_per_step, ReduceOp op)
    : passes_(passes_per_step < 1 ? 1 : passes_per_step), op_(op) {}

LocalGradientAggregator::~LocalGradientAggregator() = default;

Handle LocalGradientAggregator::Add(std::string_view name, const Tensor& grad) {
  auto fail = [&](const std::string& why) {
    return Handle(internal::Operation::Failed(
        InvalidArgument("local gradient aggregation of '" + std::string(name) + "': " + why)));
  };
  if (!IsValid(grad.dtype)) return fail("invalid dtype");
  if (grad.data == nullptr && grad.num_elements() > 0) return fail("data is null");
  Accumulator* acc = nullptr;
  for (auto& a : accumulators_) {
    if (a->name == name) acc = a.get();
  }
  if (acc == nullptr) {
    accumulators_.push_back(std::make_unique<Accumulator>());
    acc = accumulators_.back().get();
    acc->name = std::string(name);
    acc->dtype = grad.dtype;
    acc->shape = grad.shape;
  } else if (acc->dtype != grad.dtype || acc->shape != grad.shape) {
    return fail("dtype or shape changed between backward passes");
  }
  const size_t bytes = grad.num_bytes();
  if (acc->passes == 0) {
    acc->sum.assign(static_cast<const char*>(grad.data),
                    static_cast<const char*>(grad.data) + bytes);
  } else {
    runtime::collectives::ReduceInto(acc->sum.data(), grad.data,
                                     static_cast<size_t>(grad.num_elements()), grad.dtype,
                                     ReduceOp::kSum);
  }
  if (++acc->passes < passes_) return Handle();

  acc->passes = 0;
  if (bytes > 0) std::memcpy(grad.data, acc->sum.data(), bytes);
  AllreduceOptions options;
  options.op = op_;
  // Average over passes as well as ranks; a sum stays a sum.
  if (op_ == ReduceOp::kAverage) options.prescale = 1.0 / passes_;
  return AllreduceAsync(name, grad, grad, options);
}

}  // namespace hvd
