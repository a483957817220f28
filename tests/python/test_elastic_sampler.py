"""hvd.torch.elastic's ElasticSampler and TorchState's handling of it, without an elastic job:
the split (as DistributedSampler, Horovod's order), records and re-split after a size change (a
stand-in size and rank), the job's processed samples at commit (every rank's, one allgather after
the local save) and a commit failing in that allgather (one consistent snapshot). Every rank runs
every test; only test_sampler_state_is_the_jobs talks to the others."""
import pytest
import torch

from helpers import assert_equal, make_model, train_step

import hvd.common.basics as basics
from hvd.common.exceptions import HorovodInternalError
import hvd.torch.elastic as torch_elastic
import hvd.torch.elastic.sampler as sampler_module
import hvd.torch.elastic.state as state_module

pytestmark = pytest.mark.usefixtures("hvd_session")


def fake_runtime(monkeypatch, enabled, generation=None):
    monkeypatch.setattr(basics, "elastic_enabled", lambda: enabled)
    monkeypatch.setattr(basics, "elastic_generation", lambda: generation)


# ---- ElasticSampler ----------------------------------------------------------------------------

def as_rank(monkeypatch, size, rank):
    monkeypatch.setattr(sampler_module, "_size", lambda: size)
    monkeypatch.setattr(sampler_module, "_rank", lambda: rank)


def split(monkeypatch, n, size, **kwargs):
    parts = []
    for r in range(size):
        as_rank(monkeypatch, size, r)
        parts.append(list(torch_elastic.ElasticSampler(range(n), **kwargs)))
    return parts


def test_sampler_splits_like_distributed_sampler(monkeypatch):
    parts = split(monkeypatch, 10, 3, shuffle=False)
    assert parts == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]  # padded from the start
    shuffled = split(monkeypatch, 10, 3, shuffle=True, seed=5)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(5)).tolist()
    assert shuffled == [(order + order[:2])[r::3] for r in range(3)]  # Horovod's order
    assert split(monkeypatch, 10, 3, seed=5) == shuffled  # deterministic
    assert split(monkeypatch, 10, 3, seed=6) != shuffled
    # Fewer samples than ranks: every rank still gets one.
    assert split(monkeypatch, 1, 4, shuffle=False) == [[0], [0], [0], [0]]
    assert split(monkeypatch, 0, 2) == [[], []]


def test_sampler_epochs_shuffle_differently(monkeypatch):
    as_rank(monkeypatch, 1, 0)
    sampler = torch_elastic.ElasticSampler(range(50), seed=1)
    first = list(sampler)
    sampler.set_epoch(1)
    second = list(sampler)
    assert sorted(first) == sorted(second) == list(range(50)) and first != second
    assert len(sampler) == 50


def test_sampler_records_and_resplits_after_a_size_change(monkeypatch):
    as_rank(monkeypatch, 2, 0)
    sampler = torch_elastic.ElasticSampler(range(20), shuffle=True, seed=3)
    mine = list(sampler)
    assert len(sampler) == 10 and sampler.get_indices(1, 4) == mine[4:8]
    assert sampler.get_indices(2, 4) == mine[8:10]  # the last batch is short
    sampler.record_batch(0, 4)
    sampler.record_batch(1, 4)
    sampler.record_indices([mine[9]])
    assert sampler.processed_indices == set(mine[:8]) | {mine[9]}
    saved = sampler.state_dict()
    assert saved == {"epoch": 0, "processed_indices": set(mine[:8]) | {mine[9]}}
    saved["processed_indices"].add(-1)  # a copy: the sampler is unchanged
    assert -1 not in sampler.processed_indices
    saved["processed_indices"].discard(-1)

    # Three workers now: the 11 samples left are split over them, none processed twice.
    parts = []
    for r in range(3):
        as_rank(monkeypatch, 3, r)
        other = torch_elastic.ElasticSampler(range(20), shuffle=True, seed=3)
        other.load_state_dict(saved)
        assert other.num_replicas == 3 and other.rank == r and len(other) == 4
        parts.append(list(other))
    seen = [i for p in parts for i in p]
    assert len(seen) == 12
    assert set(seen) == set(range(20)) - saved["processed_indices"]

    # reset() alone re-splits over the size now in force.
    as_rank(monkeypatch, 1, 0)
    sampler.reset()
    assert len(sampler) == 11 and set(sampler) == set(range(20)) - saved["processed_indices"]
    sampler.set_epoch(1)  # a new epoch forgets what was processed
    assert sampler.processed_indices == set() and len(sampler) == 20 and sampler.epoch == 1


def test_torch_state_resplits_the_sampler_on_reset(monkeypatch):
    as_rank(monkeypatch, 2, 1)
    sampler = torch_elastic.ElasticSampler(range(12), shuffle=False)
    state = torch_elastic.TorchState(sampler=sampler, epoch=0)
    assert state.sampler is sampler and len(sampler) == 6
    assert state.model is None and state.optimizer is None  # plain values when not given
    seen = []
    state.register_reset_callbacks([lambda: seen.append(len(state.sampler))])
    as_rank(monkeypatch, 3, 1)
    state.on_reset()
    assert sampler.num_replicas == 3 and seen == [4]
    sampler.record_batch(0, 2)
    state.restore()  # back to the state at construction: nothing processed
    assert sampler.processed_indices == set() and sampler.epoch == 0


def test_sampler_state_is_the_jobs(hvd):
    """commit() keeps every rank's processed samples (the union), and sync() gives rank 0's."""
    n = hvd.size()
    sampler = torch_elastic.ElasticSampler(range(8 * n), seed=2)
    state = torch_elastic.TorchState(sampler=sampler)
    sampler.record_batch(0, 3)
    mine = set(sampler.get_indices(0, 3))
    state.commit()
    everyone = hvd.allgather_object(mine)
    union = set().union(*everyone)
    assert len(union) == 3 * n and sampler.processed_indices == union
    sampler.reset()
    assert len(sampler) == 5 and not set(sampler) & union
    sampler.record_batch(0, 1)
    state.restore()
    assert sampler.processed_indices == union
    if hvd.rank() != 0:
        sampler.set_epoch(9)  # diverged: sync brings rank 0's epoch back
    state.sync()
    assert sampler.epoch == 0 and sampler.processed_indices == union


def sampler_state(monkeypatch):
    """A TorchState (model, sampler, epoch) at size 1 outside an elastic job, its sampler's
    first batch processed and committed with a stand-in allgather (one rank)."""
    as_rank(monkeypatch, 1, 0)
    fake_runtime(monkeypatch, False)
    model, optimizer = make_model(0)
    sampler = torch_elastic.ElasticSampler(range(20), shuffle=False)
    state = torch_elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    return state, model, sampler


def test_torch_state_save_runs_no_collective(monkeypatch):
    state, _, sampler = sampler_state(monkeypatch)

    def no_collective(obj):
        raise AssertionError("save() ran a collective")
    monkeypatch.setattr(state_module, "allgather_object", no_collective)
    sampler.record_batch(0, 2)
    state.save()
    sampler.record_batch(1, 2)
    state.restore()
    assert sampler.processed_indices == {0, 1}


def test_a_failed_merge_at_commit_leaves_one_consistent_snapshot(monkeypatch):
    """A peer dying during commit()'s allgather: every part of the state is still at this commit
    (the model before the sampler, the plain values after it), never a mix of two steps."""
    state, model, sampler = sampler_state(monkeypatch)

    def dies(obj):
        raise HorovodInternalError("peer died during commit")
    monkeypatch.setattr(state_module, "allgather_object", dies)
    train_step(model, optimizer=state.optimizer)
    sampler.record_batch(0, 2)
    state.epoch = 1
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(HorovodInternalError):
        state.commit()
    train_step(model, state.optimizer, scale=5.0)
    sampler.record_batch(1, 2)
    state.epoch = 2
    state.restore()
    for k, v in model.state_dict().items():
        assert_equal(v, committed[k], "model at the commit: %s" % k)
    assert sampler.processed_indices == {0, 1} and state.epoch == 1


def test_commit_merges_samplers_after_saving_and_before_checking(monkeypatch):
    state, _, sampler = sampler_state(monkeypatch)
    other = torch_elastic.ElasticSampler(range(20), shuffle=False)
    state = torch_elastic.TorchState(sampler=sampler, other=other)
    order = []

    def gather(obj):
        order.append(("gather", [set(x) for x in obj]))
        return [obj, [{18}, {19}]]  # rank 1 processed 18 (first sampler) and 19 (second)
    monkeypatch.setattr(state_module, "allgather_object", gather)
    monkeypatch.setattr(state, "check_host_updates", lambda: order.append("check"))
    sampler.record_batch(0, 2)
    other.record_indices([5])
    state.commit()
    assert order == [("gather", [{0, 1}, {5}]), "check"]  # one collective, then the check
    assert sampler.processed_indices == {0, 1, 18} and other.processed_indices == {5, 19}
    sampler.record_batch(1, 2)
    state.restore()  # the merged samples were saved too
    assert sampler.processed_indices == {0, 1, 18} and other.processed_indices == {5, 19}
