"""DistributedOptimizer (Horovod's horovod.torch.optimizer).

The returned optimizer is an instance of a class made on the fly that derives from the wrapped
optimizer's class (so isinstance checks, schedulers and state_dict keep working) and takes over
its param_groups. A hook on each parameter's gradient accumulator starts that gradient's
allreduce as soon as backward has produced it (after backward_passes_per_step passes), so
communication overlaps the rest of backward; step() (or synchronize()) waits for them and writes
the averaged gradients into p.grad before the wrapped optimizer's step runs.
"""
import os
import warnings
from contextlib import contextmanager

import torch

from hvd.common.util import split_list
from hvd.torch.compression import Compression
from hvd.torch.functions import broadcast_object
from hvd.torch.mpi_ops import allreduce_async_, grouped_allreduce_async_, sparse_allreduce_async
from hvd.torch.mpi_ops import synchronize, size
from hvd.torch.mpi_ops import Average, Adasum
from hvd.torch.mpi_ops import global_process_set


def _named_parameters(optimizer_self, named_parameters):
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                            for i, group in enumerate(optimizer_self.param_groups)
                            for j, v in enumerate(group["params"])]
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    dups = _find_duplicates(name for name, _ in named_parameters)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(sorted(dups)))
    all_ids = {id(v) for group in optimizer_self.param_groups for v in group["params"]}
    named_ids = {id(v) for _, v in named_parameters}
    unnamed = all_ids - named_ids
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were "
                         "not named. Python object ids: %s" % ", ".join(str(i) for i in unnamed))
    return named_parameters


def _find_duplicates(items):
    seen, dups = set(), set()
    for x in items:
        (dups if x in seen else seen).add(x)
    return dups


def _set_grad(p, reduced):
    """p.grad takes the reduced gradient; an in-place allreduce left it there already (set_ of a
    tensor to itself does nothing, and a torch operation costs microseconds per parameter)."""
    if reduced is not p.grad:
        p.grad.set_(reduced)


def _grad_accumulator(p):
    """The AccumulateGrad node of leaf `p` (its hooks run once p.grad holds the new gradient)."""
    return p.expand_as(p).grad_fn.next_functions[0][0]


class _GradientHooks(torch.optim.Optimizer):
    """What both wrappers share: parameter names, the count of backward passes before a
    parameter's gradient is communicated, and a hook on each parameter's gradient accumulator
    that calls self._gradient_ready(p) once backward has produced p.grad."""

    def _setup(self, params, named_parameters, compression, backward_passes_per_step):
        self._hvd_base.__init__(self, params)
        self._compression = compression
        named_parameters = _named_parameters(self, named_parameters)
        self._parameter_names = {v: k for k, v in sorted(named_parameters, key=lambda kv: kv[0])}
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {v: self.backward_passes_per_step for _, v in named_parameters}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        return named_parameters

    def _hvd_base_step(self, closure=None):
        """The wrapped optimizer's step, without synchronizing (broadcast_optimizer_state)."""
        return self._hvd_base.step(self, closure)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def _hook_gradients(self, zero_grads=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    if zero_grads:
                        p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    acc = _grad_accumulator(p)
                    acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(acc)

    def _make_hook(self, p):
        def hook(*ignore):
            self._gradient_ready(p)
        return hook

    def _backward_pass_done(self, p):
        """Counts a backward pass that produced p.grad; True when p's communication is due."""
        if p in self._handles and self._handles[p][0] is not None:
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate "
                    "gradients locally.")
        assert not p.grad.requires_grad
        assert self._allreduce_delay[p] > 0
        self._allreduce_delay[p] -= 1
        return self._allreduce_delay[p] == 0

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return self._hvd_base.zero_grad(self, *args, **kwargs)


class _DistributedOptimizer(_GradientHooks):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        self._setup(params, named_parameters, compression, backward_passes_per_step)
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        if groups is not None:
            if not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
                raise ValueError("groups should be a non-negative integer or a list of list of "
                                 "torch.Tensor.")
            if isinstance(groups, list):
                grouped = set()
                for group in groups:
                    for p in group:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in grouped:
                            raise ValueError("A parameter can only appear once in groups.")
                        grouped.add(id(p))
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}

        if self.process_set.included() and (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1"):
            self._register_hooks()

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return self._hvd_base.load_state_dict(self, *args, **kwargs)

    find_duplicates = staticmethod(_find_duplicates)

    def _register_hooks(self):
        if self._groups is not None:
            p_list = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
            # Every rank forms the same groups in the same order: rank 0's parameter order.
            names = broadcast_object([self._parameter_names.get(p) for p in p_list], root_rank=0,
                                     name="DistributedOptimizer.groups",
                                     process_set=self.process_set)
            order = {n: i for i, n in enumerate(names)}
            p_list = sorted(p_list, key=lambda p: order.get(self._parameter_names.get(p), 0))
            if isinstance(self._groups, list):
                ids = {id(p) for p in p_list}
                p_groups, grouped = [], set()
                for group in self._groups:
                    p_groups.append([p for p in group if id(p) in ids])
                    grouped.update(id(p) for p in p_groups[-1])
                p_groups.extend([p] for p in p_list if id(p) not in grouped)
                p_groups = [g for g in p_groups if g]
            else:
                p_groups = split_list(p_list, self._groups)
            for group in (tuple(g) for g in p_groups):
                for p in group:
                    self._p_to_group[p] = group
                self._group_counts[group] = 0
        self._hook_gradients()

    def _scale_factors(self):
        if self.op == Average:
            # The average splits into 1/f before the sum and f (then 1/size) after it.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed here, but other ranks may have (a dynamic graph): take part with zeros.
            p.grad = p.data.new(p.size()).zero_()
        name = self._parameter_names.get(p)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                tensor = tensor.to_dense()
            else:
                return self._sparse_allreduce_grad_async(p, name)
        compressed, ctx = self._compression.compress(tensor)
        prescale, postscale = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=prescale,
                                  postscale_factor=postscale, process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, ps):
        name = self._parameter_names.get(ps[0])
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
        compressed, ctxs = zip(*[self._compression.compress(p.grad) for p in ps])
        prescale, postscale = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=name, op=self.op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self.process_set)
        return handle, ctxs

    def _sparse_allreduce_grad_async(self, p, name):
        handle = sparse_allreduce_async(p.grad, name=name, op=self.op,
                                        process_set=self.process_set)
        return handle, None

    def _gradient_ready(self, p):
        handle, ctx = None, None
        if self._backward_pass_done(p):
            if self._groups is not None:
                group = self._p_to_group[p]
                self._group_counts[group] += 1
                if self._group_counts[group] == len(group):
                    handle, ctxs = self._grouped_allreduce_grad_async(group)
                    self._handles[group] = (handle, ctxs)
                    for gp in group:  # drop the placeholders of earlier members
                        self._handles.pop(gp, None)
                    self._group_counts[group] = 0
                    return
            else:
                handle, ctx = self._allreduce_grad_async(p)
        self._handles[p] = (handle, ctx)

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those backward did not) and writes the
        results into p.grad. Call it before clipping or inspecting gradients, then
        `with optimizer.skip_synchronize(): optimizer.step()`."""
        if not self.process_set.included():
            self._synchronized = True
            return

        completed = set()
        for x in self._handles.keys():
            completed.update(x) if isinstance(x, tuple) else completed.add(x)
        for p in self._requires_update - completed:
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:
                self._handles[p] = self._allreduce_grad_async(p)

        for p, (handle, ctx) in self._handles.items():
            if isinstance(p, tuple):
                outputs = synchronize(handle)
                for gp, output, gctx in zip(p, outputs, ctx):
                    self._allreduce_delay[gp] = self.backward_passes_per_step
                    _set_grad(gp, self._compression.decompress(output, gctx))
                if self._groups is not None and self._group_counts.get(p):
                    self._group_counts[p] = 0
            else:
                output = handle() if callable(handle) else synchronize(handle)
                self._allreduce_delay[p] = self.backward_passes_per_step
                if self._groups is not None:
                    group = self._p_to_group.get(p)
                    if group is not None and self._group_counts.get(group):
                        self._group_counts[group] = 0
                if p.grad.is_sparse:
                    aggregated = self._compression.decompress(output, ctx)
                    if not aggregated.is_sparse:
                        aggregated = aggregated.to_sparse()  # sparse_as_dense
                    p.grad.zero_().add_(aggregated)
                else:
                    _set_grad(p, self._compression.decompress(output, ctx))
        self._handles.clear()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Within it, step() does not synchronize (use after an explicit synchronize())."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return self._hvd_base.step(self, closure)


class _DistributedAdasumOptimizer(_GradientHooks):
    """Adasum (op=Adasum with more than one rank): each parameter's update is computed locally by
    the wrapped optimizer, and the updates (deltas), not the gradients, are combined with Adasum."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        named_parameters = self._setup(params, named_parameters, compression,
                                       backward_passes_per_step)
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for _, p in named_parameters}
        self._hook_gradients(zero_grads=True)

    def _allreduce_grad_async(self, p):
        # delta = (start - lr * f(g)) - start, computed by stepping the wrapped optimizer on p
        # alone from `start`; the deltas are Adasum-combined and applied to `start` in step().
        name = self._parameter_names.get(p)
        start = self._starting_models[p]
        stashed = []
        for group in self.param_groups:
            stashed.append(group["params"])
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p)
            self._hvd_base.step(self)
            p.data.sub_(start)
        finally:
            for params, group in zip(stashed, self.param_groups):
                group["params"] = params
        compressed, ctx = self._compression.compress(p)
        handle = allreduce_async_(compressed.data, name=name, op=Adasum)
        return handle, ctx

    def _gradient_ready(self, p):
        due = self._backward_pass_done(p)
        self._handles[p] = self._allreduce_grad_async(p) if due else (None, None)

    def synchronize(self):
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles.keys()):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if not handle:
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[p] = (handle, ctx)
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss


def _make_class(optimizer, impl):
    base = optimizer.__class__
    attrs = {}
    for cls in (_GradientHooks, impl):  # impl's own attributes win
        attrs.update((k, v) for k, v in cls.__dict__.items()
                     if k not in ("__dict__", "__weakref__"))
    attrs["_hvd_base"] = base
    return type(base.__name__, (base,), attrs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that step() applies gradients averaged (op) over the ranks of
    `process_set`, allreduced while backward runs.

    named_parameters: model.named_parameters(), naming each allreduce (recommended; every rank
        must name the same parameters alike).
    compression: Compression.none or Compression.fp16 (gradients sent as float16).
    backward_passes_per_step: backward passes whose gradients accumulate locally (in p.grad)
        before one allreduce; step() after that many passes. As Horovod, the accumulated sum is
        not divided by the number of passes.
    op: Average (default), Sum or Adasum (Adasum combines parameter updates, see
        _DistributedAdasumOptimizer).
    gradient_predivide_factor: with Average, gradients are scaled by 1/f before the sum and by
        f/size after it.
    groups: an int (that many groups of consecutive parameters) or a list of lists of parameters:
        each group is allreduced as one grouped operation. num_groups is its deprecated name.
    sparse_as_dense: allreduce sparse gradients as dense tensors instead of allgathering them.
    process_set: the ranks that average their gradients (default: all).

    Example (gradient clipping):

        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        with optimizer.skip_synchronize():
            optimizer.step()
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if "_hvd_base" in type(optimizer).__dict__:  # a class _make_class made
        raise ValueError("hvd.DistributedOptimizer(%s): the optimizer is already a "
                         "DistributedOptimizer; wrap the plain optimizer once"
                         % type(optimizer).__name__)
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed.",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups

    if op != Adasum or size() == 1:
        cls = _make_class(optimizer, _DistributedOptimizer)
        return cls(optimizer.param_groups, named_parameters, compression,
                   backward_passes_per_step, op, gradient_predivide_factor, groups,
                   sparse_as_dense, process_set)
    if process_set is not global_process_set and process_set.process_set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    cls = _make_class(optimizer, _DistributedAdasumOptimizer)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
