"""DistributedOptimizer: N ranks on their shares of a batch end with the parameters one process
gets on the whole batch (backward_passes_per_step 1 and 4, fp16 compression, groups, Sum,
predivide, sparse gradients), explicit synchronize(), Adasum, and join with uneven data."""
import pytest
import torch
import torch.nn.functional as F

from helpers import assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")

B = 3  # rows per rank per backward pass


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def dataset(steps, passes, rows):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(steps, passes, rows, 4, generator=g),
            torch.randn(steps, passes, rows, 1, generator=g))


def check_close(model, ref, atol):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=atol, rtol=0), "%s: max diff %g" % (
            name, (p - q).abs().max())


@pytest.mark.parametrize("passes,compression,kwargs,atol", [
    (1, "none", {}, 1e-6),
    (4, "none", {}, 1e-6),
    (1, "fp16", {}, 3e-3),
    (4, "fp16", {}, 3e-3),
    (1, "none", {"groups": 2}, 1e-6),
    (2, "none", {"groups": "list"}, 1e-6),
    (1, "none", {"num_groups": 1}, 1e-6),
    (1, "none", {"gradient_predivide_factor": 2.0}, 1e-6),
    (1, "none", {"op": "sum"}, 1e-6),
])
def test_matches_one_process_on_the_whole_batch(hvd, passes, compression, kwargs, atol):
    n, r = hvd.size(), hvd.rank()
    steps = 3
    X, Y = dataset(steps, passes, n * B)
    model, ref = make_model(), make_model()
    kwargs = dict(kwargs)
    lr = 0.1
    if kwargs.get("op") == "sum":
        kwargs["op"] = hvd.Sum  # sums gradients: the same as averaging with lr / n
        lr = 0.1 / n
    if kwargs.get("groups") == "list":
        kwargs["groups"] = [[model[0].weight, model[2].weight]]
    if "num_groups" in kwargs:
        ctx = pytest.warns(DeprecationWarning)
    else:
        ctx = _null()
    with ctx:
        opt = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
            named_parameters=model.named_parameters(), backward_passes_per_step=passes,
            compression=getattr(hvd.Compression, compression), **kwargs)
    assert isinstance(opt, torch.optim.SGD)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    mine = slice(r * B, (r + 1) * B)
    for s in range(steps):
        for k in range(passes):
            (F.mse_loss(model(X[s, k, mine]), Y[s, k, mine]) / passes).backward()
            (F.mse_loss(ref(X[s, k]), Y[s, k]) / passes).backward()
        opt.step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    check_close(model, ref, atol)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_synchronize_then_step_and_zero_grad_guard(hvd):
    n, r = hvd.size(), hvd.rank()
    X, Y = dataset(1, 1, n * B)
    model, ref = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    mine = slice(r * B, (r + 1) * B)
    F.mse_loss(model(X[0, 0, mine]), Y[0, 0, mine]).backward()
    F.mse_loss(ref(X[0, 0]), Y[0, 0]).backward()
    if n > 1:
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()  # allreduces in flight
    opt.synchronize()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    with opt.skip_synchronize():
        opt.step()
    ref_opt.step()
    check_close(model, ref, 1e-6)
    opt.zero_grad()
    # step() right after synchronize() without skip_synchronize() warns (as Horovod).
    F.mse_loss(model(X[0, 0, mine]), Y[0, 0, mine]).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()
    opt.zero_grad()
    with pytest.raises(ValueError, match="already a DistributedOptimizer"):
        hvd.DistributedOptimizer(opt)


def test_parameter_without_gradient_on_some_rank(hvd):
    # A parameter whose gradient only some ranks compute still gets allreduced (zeros elsewhere).
    n, r = hvd.size(), hvd.rank()
    model = make_model()
    extra = torch.nn.Parameter(torch.ones(2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(list(model.parameters()) + [extra], lr=1.0),
                                   named_parameters=list(model.named_parameters()) +
                                   [("extra", extra)])
    loss = model(torch.ones(1, 4)).sum()
    if r == 0:
        loss = loss + extra.sum() * n
    loss.backward()
    opt.step()
    assert_equal(extra.detach(), torch.zeros(2), "extra updated with the average")


def test_sparse_gradients(hvd):
    n, r = hvd.size(), hvd.rank()
    idx = torch.arange(n * 4) % 7

    def run(sparse_model, **kwargs):
        torch.manual_seed(0)
        emb = torch.nn.Embedding(10, 3, sparse=sparse_model)
        return emb

    for sparse_as_dense in (False, True):
        emb, ref = run(True), run(False)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=sparse_as_dense)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
        for step in range(2):
            mine = idx[r * 4:(r + 1) * 4]
            (emb(mine) ** 2).mean().backward()
            (ref(idx) ** 2).mean().backward()
            opt.step()
            ref_opt.step()
            opt.zero_grad()
            ref_opt.zero_grad()
        assert torch.allclose(emb.weight, ref.weight, atol=1e-6), sparse_as_dense


def test_sparse_allreduce_async(hvd):
    n, r = hvd.size(), hvd.rank()
    t = torch.sparse_coo_tensor(torch.tensor([[r]]), torch.tensor([float(r + 1)]), (n,))
    h = hvd.sparse_allreduce_async(t, name="sparse.test", op=hvd.Sum)
    out = hvd.synchronize(h)
    assert out.is_sparse
    assert_equal(out.to_dense(), torch.arange(1, n + 1, dtype=torch.float32), "sparse sum")
    out = hvd.sparse_allreduce_async(t, name=None, op=hvd.Average)()
    assert_equal(out.to_dense(), torch.arange(1, n + 1, dtype=torch.float32) / n, "sparse avg")


def test_adasum_optimizer(hvd):
    n, r = hvd.size(), hvd.rank()
    X, Y = dataset(2, 1, n * B)
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    mine = slice(r * B, (r + 1) * B)
    for s in range(2):
        F.mse_loss(model(X[s, 0, mine]), Y[s, 0, mine]).backward()
        opt.step()
        opt.zero_grad()
    everyone = hvd.allgather_object([p.detach() for p in model.parameters()])
    for other in everyone:
        for a, b in zip(other, everyone[0]):
            assert torch.allclose(a, b, atol=1e-6), "ranks disagree after Adasum steps"
    if n == 1:  # one rank: Adasum is the plain optimizer
        ref = make_model()
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for s in range(2):
            F.mse_loss(ref(X[s, 0, mine]), Y[s, 0, mine]).backward()
            ref_opt.step()
            ref_opt.zero_grad()
        check_close(model, ref, 1e-6)


def test_join_with_uneven_data(hvd):
    """Rank k trains 2 + k steps, then joins; a joined rank contributes nothing and averages
    divide by the ranks still training. Every rank checks its parameters against a replay."""
    n, r = hvd.size(), hvd.rank()
    steps = [2 + k for k in range(n)]
    X, Y = dataset(max(steps), n, B)  # X[s, k]: rank k's batch at step s
    model, ref = make_model(), make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for s in range(steps[r]):
        F.mse_loss(model(X[s, r]), Y[s, r]).backward()
        opt.step()
        opt.zero_grad()
    last = hvd.join()
    assert last == n - 1

    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(steps[r]):
        training = [k for k in range(n) if s < steps[k]]
        for k in training:
            (F.mse_loss(ref(X[s, k]), Y[s, k]) / len(training)).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    check_close(model, ref, 1e-6)
    # After everyone joined, collectives run as usual.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(n)), "after")
