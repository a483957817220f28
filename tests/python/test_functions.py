"""broadcast_parameters, broadcast_optimizer_state (including lazily created state),
broadcast_object and allgather_object (with joined ranks too)."""
import pickle

import pytest
import torch

from helpers import assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


def model_for(rank):
    torch.manual_seed(100 + rank)  # different weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3),
                               torch.nn.Linear(3, 2))


def test_broadcast_parameters(hvd):
    r, root = hvd.rank(), hvd.size() - 1
    want = model_for(root).state_dict()

    m = model_for(r)
    hvd.broadcast_parameters(m.state_dict(), root_rank=root)
    for k, v in m.state_dict().items():
        assert_equal(v, want[k], "state_dict " + k)

    m = model_for(r)
    hvd.broadcast_parameters(m.named_parameters(), root_rank=root)  # a generator
    for k, v in m.named_parameters():
        assert_equal(v.detach(), want[k], "named_parameters " + k)

    m = model_for(r)
    hvd.broadcast_parameters(list(m.parameters()), root_rank=root)
    for (k, v) in m.named_parameters():
        assert_equal(v.detach(), want[k], "parameters " + k)

    with pytest.raises(ValueError):
        hvd.broadcast_parameters(42, root_rank=0)


def opt_state(opt):
    return {k: (v.clone() if torch.is_tensor(v) else v)
            for s in opt.state.values() for k, v in s.items()}


def step_once(model, opt, seed):
    torch.manual_seed(seed)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("make", [
    lambda p, lr: torch.optim.Adam(p, lr=lr, weight_decay=0.1),
    lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9, weight_decay=0.01),
    lambda p, lr: torch.optim.RMSprop(p, lr=lr, momentum=0.5),
    lambda p, lr: torch.optim.Adagrad(p, lr=lr),
])
def test_broadcast_optimizer_state(hvd, make):
    r, root = hvd.rank(), 0
    # Root has stepped twice (state exists); the others have not stepped at all (lazy state).
    model = model_for(root)
    opt = make(model.parameters(), 0.01 * (r + 1))
    if r == root:
        step_once(model, opt, 1)
        step_once(model, opt, 2)
    want = hvd.broadcast_object({"state": opt_state(opt), "lr": opt.param_groups[0]["lr"]},
                                root_rank=root, name="expected_state")
    params_before = [p.detach().clone() for p in model.parameters()]
    grads_before = [p.grad for p in model.parameters()]

    hvd.broadcast_optimizer_state(opt, root_rank=root)

    assert opt.param_groups[0]["lr"] == want["lr"] == 0.01
    got = opt_state(opt)
    assert sorted(got) == sorted(want["state"])
    for k, v in got.items():
        if torch.is_tensor(v):
            assert_equal(v, want["state"][k], "state " + k)
        else:
            assert v == want["state"][k], k
    # Creating the state did not move the parameters (weight decay would have) or keep grads.
    for p, before, g in zip(model.parameters(), params_before, grads_before):
        assert_equal(p.detach(), before, "parameters untouched")
        assert p.grad is g
    # And, from the root's parameters, the optimizer keeps working in lockstep.
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    step_once(model, opt, 3)
    weights = hvd.allgather_object([p.detach() for p in model.parameters()])
    for other in weights:
        for a, b in zip(other, weights[0]):
            assert_equal(a, b, "same step everywhere")


def test_broadcast_optimizer_state_of_distributed_optimizer(hvd):
    r = hvd.rank()
    model = model_for(0)
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.001 * (r + 1)),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)  # lazy state: no allreduce may start
    assert opt.param_groups[0]["lr"] == 0.001
    assert len(opt.state) == len(list(model.parameters()))
    step_once(model, opt, 4)


def test_broadcast_optimizer_state_stateless_and_lbfgs(hvd):
    model = model_for(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1))
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)


def test_object_collectives(hvd):
    r, n = hvd.rank(), hvd.size()
    obj = {"rank": r, "payload": list(range(r * 100)), "t": torch.ones(r + 1)}  # sizes differ
    got = hvd.broadcast_object(obj if r == n - 1 else None, root_rank=n - 1)
    assert got["rank"] == n - 1 and got["payload"] == list(range((n - 1) * 100))
    assert_equal(got["t"], torch.ones(n), "tensor inside")
    assert hvd.broadcast_object("x" * 70000 if r == 0 else "", root_rank=0) == "x" * 70000
    assert hvd.broadcast_object(None, root_rank=0) is None

    everyone = hvd.allgather_object(obj)
    assert [o["rank"] for o in everyone] == list(range(n))
    assert [len(o["payload"]) for o in everyone] == [k * 100 for k in range(n)]
    assert hvd.allgather_object(r % 2 == 0, name="flags") == [k % 2 == 0 for k in range(n)]
    assert hvd.allgather_object(b"" if r else b"abc") == [b"abc"] + [b""] * (n - 1)


def test_object_collectives_with_an_object_pickle_refuses(hvd):
    """The rank whose object pickle refuses still takes part: it raises pickle's error, every
    other rank a ValueError naming it, and nobody waits for bytes that never come (the job goes
    on)."""
    r, n = hvd.rank(), hvd.size()
    unpicklable = lambda x: x  # noqa: E731 (a lambda is what pickle refuses)
    refused = (pickle.PicklingError, AttributeError, TypeError)
    root = n - 1
    if r == root:
        with pytest.raises(refused):
            hvd.broadcast_object(unpicklable, root_rank=root)
    else:
        with pytest.raises(ValueError, match=r"broadcast_object: rank %d could not pickle its "
                                             r"object \(.*\); hvd sends objects with pickle"
                                             % root):
            hvd.broadcast_object(None, root_rank=root)
    if r == 0:
        with pytest.raises(refused):
            hvd.allgather_object(unpicklable)
    else:
        with pytest.raises(ValueError, match="allgather_object: rank 0 could not pickle"):
            hvd.allgather_object(r)
    assert hvd.broadcast_object("after", root_rank=0) == "after"
    assert hvd.allgather_object(r) == list(range(n))


def test_root_rank_must_be_an_integer(hvd):
    """Horovod's binding (pybind11) refuses 0.0; int(1.5) would name rank 1 without a word.
    Refused alike on every rank, before anything is enqueued."""
    for bad in (0.0, 1.5, "0", None):
        with pytest.raises(TypeError, match="root_rank must be an integer"):
            hvd.broadcast(torch.ones(1), bad)
        with pytest.raises(TypeError, match="root_rank must be an integer"):
            hvd.broadcast_(torch.ones(1), bad)
        with pytest.raises(TypeError, match="root_rank must be an integer"):
            hvd.broadcast_object("x", bad)
    # What indexes as an integer is one (a 0-d integer tensor, as some scripts pass).
    got = hvd.broadcast(torch.full((2,), float(hvd.rank())), torch.tensor(0), name="root_index")
    assert_equal(got, torch.zeros(2), "broadcast from a tensor root")


def test_allgather_object_with_joined_ranks(hvd):
    """A joined rank contributes no bytes: the others get HorovodInternalError naming it, not
    pickle's EOFError. Named: the joined ranks do not call it, so a numbered name would differ."""
    r, n = hvd.rank(), hvd.size()
    if n < 2:
        pytest.skip("needs 2 ranks")
    joining = [1] if n < 4 else [1, 3]
    if r in joining:
        assert hvd.join() in range(n)
        return
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.allgather_object({"rank": r}, name="with_joined")
    names = "rank 1 has" if n < 4 else "ranks 1, 3 have"
    assert str(e.value) == ("allgather_object: %s joined and contributed nothing; call "
                            "allgather_object on every rank before hvd.join()" % names)
    assert hvd.join() in range(n)


def test_in_place_on_an_expanded_tensor_is_refused_before_it_runs(hvd):
    """An expanded tensor's elements share memory: the result cannot be written back, so an
    in-place operation refuses it up front (it failed after the collective, copying back; Horovod
    refuses every non-contiguous tensor)."""
    t = torch.ones(1).expand(4)
    for call in (hvd.allreduce_, hvd.allreduce_async_, lambda x: hvd.broadcast_(x, 0)):
        with pytest.raises(ValueError, match="shares memory between elements"):
            call(t)
    # A strided slice has memory of its own per element: in place works on it, writing only it.
    base = torch.zeros(6)
    view = base[::2]
    view.fill_(1.0)
    hvd.allreduce_(view, op=hvd.Sum)
    assert_equal(base, torch.tensor([hvd.size(), 0, hvd.size(), 0, hvd.size(), 0],
                                    dtype=torch.float32), "strided in place")


def test_check_extension_is_horovods(hvd):
    hvd.check_extension("horovod.torch", "HOROVOD_WITH_PYTORCH", __file__, "mpi_lib_v2")
    with pytest.raises(ImportError, match="binds PyTorch only"):
        hvd.check_extension("horovod.tensorflow", "HOROVOD_WITH_TENSORFLOW", __file__, "mpi_lib")
