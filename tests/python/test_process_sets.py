"""Process sets: registered at init and added/removed later (dynamic), collectives and
DistributedOptimizer on a subset, errors for non-members and duplicates, re-init."""
import os

import pytest
import torch

from helpers import DTYPES, assert_equal

pytestmark = pytest.mark.usefixtures("hvd_session")


def test_process_set_objects(hvd):
    ps = hvd.ProcessSet([3, 1, 2])
    assert ps.ranks == [1, 2, 3] and ps.process_set_id is None
    assert ps.size() is None and ps.rank() is None
    with pytest.raises(ValueError):
        hvd.ProcessSet(["a"])
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert hvd.remove_process_set(ps) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert "process_set_id=0" in str(hvd.global_process_set)


def test_dynamic_sets_and_collectives(hvd):
    n, r = hvd.size(), hvd.rank()
    evens = [k for k in range(n) if k % 2 == 0]
    if n == 1:
        # The only set of one rank is the global set's ranks: it exists already.
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set([0])
        pytest.skip("needs two ranks")
    ps = hvd.add_process_set(evens)
    try:
        assert ps.process_set_id > 0 and ps.ranks == evens and ps.size() == len(evens)
        assert ps.included() == (r in evens)
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set(hvd.ProcessSet(evens))
        if r not in evens:
            with pytest.raises(ValueError, match="not part"):
                ps.rank()
            with pytest.raises(ValueError, match="not in process set"):
                hvd.allreduce(torch.ones(1), process_set=ps)
        else:
            me = evens.index(r)
            assert ps.rank() == me
            m = len(evens)
            for dtype in DTYPES:
                t = torch.ones(3, dtype=dtype)
                assert_equal(hvd.allreduce(t, op=hvd.Max, process_set=ps), t, "set allreduce")
            # Unnamed operations on the set do not shift the global set's names.
            x = torch.full((2,), float(r))
            assert_equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps),
                         torch.full((2,), float(sum(evens))), "set sum")
            got = hvd.allgather(torch.full((me + 1,), float(r)), process_set=ps)
            want = torch.cat([torch.full((k + 1,), float(evens[k])) for k in range(m)])
            assert_equal(got, want, "set allgather")
            root = evens[-1]
            assert_equal(hvd.broadcast(x, root_rank=root, process_set=ps),
                         torch.full((2,), float(root)), "set broadcast")
            out, rs = hvd.alltoall(torch.arange(m, dtype=torch.float32) + 10 * me,
                                   splits=[1] * m, process_set=ps)
            assert_equal(out, torch.tensor([10.0 * k + me for k in range(m)]), "set alltoall")
            assert_equal(hvd.reducescatter(torch.ones(2 * m), op=hvd.Sum, process_set=ps),
                         torch.full((2,), float(m)), "set reducescatter")
            hvd.barrier(process_set=ps)
            assert hvd.allgather_object(r, process_set=ps) == evens
            assert hvd.broadcast_object(r, root_rank=root, process_set=ps) == root
            # Gradients through the set.
            leaf = torch.ones(me + 1, requires_grad=True)
            hvd.allgather(leaf, process_set=ps).sum().backward()
            assert_equal(leaf.grad, torch.ones(me + 1), "set allgather grad")
            # An optimizer that averages over the set.
            model = torch.nn.Linear(2, 1)
            torch.nn.init.zeros_(model.weight)
            torch.nn.init.zeros_(model.bias)
            opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                           named_parameters=model.named_parameters(),
                                           process_set=ps)
            model(torch.ones(1, 2) * r).sum().backward()
            opt.step()
            assert_equal(model.weight.detach(), torch.full((1, 2), -sum(evens) / m), "set opt")
        # Every rank: an unnamed global operation after unnamed set operations on some ranks.
        assert_equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(n)),
                     "global after set")
    finally:
        assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps)


def test_sets_at_init(hvd):
    """hvd.shutdown() then hvd.init(process_sets=[...]): a new session with static sets."""
    n, r = hvd.size(), hvd.rank()
    if n < 2:
        pytest.skip("needs two ranks")
    first, rest = hvd.ProcessSet([0]), hvd.ProcessSet(range(1, n))
    # Shutdown fails operations still pending on other ranks: let every rank finish first.
    hvd.barrier()
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match="not been initialized"):
        hvd.size()
    shut_down = r"hvd was shut down \(hvd.shutdown\(\)\); call hvd.init\(\) again first"
    with pytest.raises(RuntimeError, match=shut_down):
        hvd.allreduce(torch.ones(1))
    # An asynchronous call raises at the call, as Horovod's (not at synchronize()).
    for call in (lambda: hvd.allreduce_async(torch.ones(1)),
                 lambda: hvd.grouped_allreduce_async([torch.ones(1)]),
                 lambda: hvd.alltoall_async(torch.ones(2))):
        with pytest.raises(RuntimeError, match="was shut down"):
            call()
    # A communicator over a subset is refused, and leaves nothing initialized (it did: the next
    # hvd.init(process_sets=...) then said hvd was initialized already).
    with pytest.raises(ValueError, match="subset needs MPI"):
        hvd.init(comm=[0, 0] if n > 1 else [5])
    assert not hvd.is_initialized()
    # The session's hvd.init(process_sets="dynamic") set Horovod's variable, as Horovod's does:
    # static sets alone need it gone.
    dynamic_env = os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    hvd.init(process_sets=[first, rest])
    try:
        assert hvd.is_initialized() and hvd.size() == n
        assert first.process_set_id is not None and rest.process_set_id is not None
        assert first.process_set_id != rest.process_set_id
        mine = first if r == 0 else rest
        assert mine.included() and mine.rank() == (0 if r == 0 else r - 1)
        out = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=mine)
        assert_equal(out, torch.full((2,), float(mine.size())), "static set")
        # Static sets only: adding one needs dynamic process sets.
        with pytest.raises(ValueError, match="dynamic"):
            hvd.add_process_set([0, 1])
    finally:
        if dynamic_env is not None:
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = dynamic_env
        hvd.barrier()
        hvd.shutdown()
        hvd.init(process_sets="dynamic")  # as the session fixture left it
    assert_equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(n)),
                 "after re-init")


def test_dynamic_sets_survive_a_reinit(hvd):
    """hvd.init(process_sets="dynamic"), then shutdown(); init() as hvd.elastic.run's reset does:
    sets may still be added (Horovod's init sets HOROVOD_DYNAMIC_PROCESS_SETS=1). A set object
    kept from before names nothing now: ids are given afresh."""
    n = hvd.size()
    if n < 2:
        pytest.skip("needs two ranks (a set of one rank out of one is the global set)")
    kept = hvd.add_process_set([0])
    hvd.barrier()
    hvd.shutdown()
    saved = os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
    try:
        hvd.init(process_sets="dynamic")
        assert os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") == "1"
        hvd.barrier()
        hvd.shutdown()
        hvd.init()
        assert kept.process_set_id is None
        with pytest.raises(ValueError, match="hvd was shut down since it was registered"):
            hvd.allreduce(torch.ones(1), process_set=kept)
        other = hvd.add_process_set([n - 1])
        assert other.process_set_id is not None and other.ranks == [n - 1]
        assert hvd.remove_process_set(other) is True
    finally:
        if saved is None:  # the environment as it was (the running session is dynamic as before)
            os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
        else:
            os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = saved


def test_init_with_the_global_set_among_its_sets(hvd):
    """A set equal to the job's ranks duplicates the global set: ValueError as Horovod, saying
    what it duplicates and that hvd stays initialized, with the global set whole."""
    n = hvd.size()
    hvd.barrier()
    hvd.shutdown()
    everyone = hvd.ProcessSet(range(n))
    try:
        with pytest.raises(ValueError, match=r"entry number 0 is a duplicate: .* \(of the global "
                                             r"set; hvd is initialized all the same"):
            hvd.init(process_sets=[everyone])
        assert hvd.is_initialized() and everyone.process_set_id is None
        assert hvd.global_process_set.ranks == list(range(n))
        assert hvd.allgather_object(hvd.rank()) == list(range(n))
    finally:
        hvd.barrier()
        hvd.shutdown()
        hvd.init(process_sets="dynamic")  # as the session fixture left it
