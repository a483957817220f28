"""Elastic training's Python side (hvd.torch.elastic, hvd.common.elastic) without an elastic job:
the run() loop (restore, reset, sync, skip_sync and a newer generation overriding it, errors that
must not loop, no reset limit of its own) with injected errors and a stand-in reset, one real
reset (hvd.shutdown(); hvd.init()) inside run(), check_host_updates over a stand-in runtime
answer, ObjectState/TorchState save, restore and sync at the job's size, the horovod names.
ElasticSampler: test_elastic_sampler.py. Every rank runs every test; only the collective ones
talk to the others."""
import os
import sys

import pytest
import torch

from helpers import assert_equal, make_model, train_step

import hvd.common.basics as basics
import hvd.common.elastic as common_elastic
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
import hvd.torch.elastic as torch_elastic

pytestmark = pytest.mark.usefixtures("hvd_session")


class LoggingState(common_elastic.State):
    """A State that logs what the loop calls."""

    def __init__(self):
        super().__init__(bcast_object=lambda obj: obj, get_rank=lambda: 0)
        self.log = []
        self.register_reset_callbacks([lambda: self.log.append("callback")])

    def save(self):
        self.log.append("save")

    def restore(self):
        self.log.append("restore")

    def sync(self):
        self.log.append("sync")

    def on_reset(self):
        self.log.append("on_reset")
        super().on_reset()


def scripted(state, errors, result="done"):
    """A training function raising errors[i] at its i-th call, then returning `result`."""
    calls = []

    def func(s, *args, **kwargs):
        calls.append((args, kwargs))
        s.log.append("func")
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result
    return func, calls


# ---- the run() loop ----------------------------------------------------------------------------

def test_internal_error_restores_resets_and_syncs():
    state = LoggingState()
    func, calls = scripted(state, [HorovodInternalError("peer died")])
    resets = []
    wrapped = common_elastic.run_fn(func, lambda: (resets.append(1), state.log.append("reset")))
    assert wrapped(state, 1, k=2) == "done"
    assert state.log == ["sync", "func", "restore", "reset", "on_reset", "callback", "sync",
                         "func"]
    assert calls == [((1,), {"k": 2})] * 2 and len(resets) == 1


def test_hosts_updated_resets_without_restore_and_honours_skip_sync():
    state = LoggingState()
    func, _ = scripted(state, [HostsUpdatedInterrupt(True), HostsUpdatedInterrupt(False)])
    wrapped = common_elastic.run_fn(func, lambda: state.log.append("reset"))
    assert wrapped(state) == "done"
    assert state.log == ["sync", "func",
                         "reset", "on_reset", "callback", "func",             # skip_sync: no sync
                         "reset", "on_reset", "callback", "sync", "func"]


def test_internal_error_after_skip_sync_syncs_again():
    state = LoggingState()
    func, _ = scripted(state, [HostsUpdatedInterrupt(True), HorovodInternalError("x")])
    common_elastic.run_fn(func, lambda: None)(state)
    assert state.log == ["sync", "func", "on_reset", "callback", "func", "restore", "on_reset",
                         "callback", "sync", "func"]


def test_other_errors_propagate_without_reset():
    state = LoggingState()
    func, _ = scripted(state, [ValueError("a bug")])
    with pytest.raises(ValueError, match="a bug"):
        common_elastic.run_fn(func, lambda: state.log.append("reset"))(state)
    assert state.log == ["sync", "func"]


def test_torch_run_uses_hvd_reset(monkeypatch):
    state = LoggingState()
    monkeypatch.setattr(torch_elastic, "_reset", lambda: state.log.append("hvd reset"))
    func, _ = scripted(state, [HorovodInternalError("x")], result=7)
    wrapped = torch_elastic.run(func)
    assert wrapped.__name__ == "func"
    assert wrapped(state) == 7
    assert state.log == ["sync", "func", "restore", "hvd reset", "on_reset", "callback", "sync",
                         "func"]


@pytest.mark.parametrize("name", ["HVD_ELASTIC_RESET_LIMIT", "HOROVOD_ELASTIC_RESET_LIMIT"])
def test_reset_limit_is_the_launchers_not_the_loops(monkeypatch, name):
    """hvdrun --reset-limit is enforced by the launcher per job (membership generations); the
    loop counts nothing, so a worker never stops on its own count."""
    monkeypatch.setenv(name, "1")
    state = LoggingState()
    func, calls = scripted(state, [HorovodInternalError("x"), HostsUpdatedInterrupt(False),
                                   HorovodInternalError("y")])
    assert common_elastic.run_fn(func, lambda: None)(state) == "done"
    assert len(calls) == 4
    assert not hasattr(common_elastic, "reset_limit")


def test_a_failing_reset_propagates_without_looping():
    """hvd.init() in the reset refuses a new session when the job is ending (a worker finished:
    FAILED_PRECONDITION, a plain RuntimeError): the loop must stop, not retry."""
    state = LoggingState()
    func, calls = scripted(state, [HorovodInternalError("peer finished")] * 5)
    resets = []

    def reset():
        resets.append(1)
        raise RuntimeError("hvd init: a worker of this elastic job finished; the job is ending")
    with pytest.raises(RuntimeError, match="job is ending") as info:
        common_elastic.run_fn(func, reset)(state)
    assert not isinstance(info.value, HorovodInternalError)
    assert len(calls) == 1 and len(resets) == 1
    assert state.log == ["sync", "func", "restore"]
    # The same after a membership change (no restore).
    state = LoggingState()
    func, calls = scripted(state, [HostsUpdatedInterrupt(True)] * 5)
    resets.clear()
    with pytest.raises(RuntimeError, match="job is ending"):
        common_elastic.run_fn(func, reset)(state)
    assert len(calls) == 1 and len(resets) == 1 and state.log == ["sync", "func"]


def interrupted_by_rank0(monkeypatch, rank0_view, joined_after_reset):
    """run() over a LoggingState whose func commits once: check_host_updates() sees rank 0's
    view `rank0_view` and raises; the reset then joins generation `joined_after_reset`."""
    state = LoggingState()
    fake_runtime(monkeypatch, True, rank0_view)
    calls = []

    def func(s):
        calls.append(1)
        s.log.append("func")
        if len(calls) == 1:
            s.check_host_updates()
        return "done"

    def reset():
        state.log.append("reset")
        fake_runtime(monkeypatch, True, (joined_after_reset, joined_after_reset, False))
    assert common_elastic.run_fn(func, reset)(state) == "done"
    return state.log


def test_skip_sync_holds_when_the_reset_joins_that_generation(monkeypatch):
    log = interrupted_by_rank0(monkeypatch, (1, 2, True), joined_after_reset=2)
    assert log == ["sync", "func", "reset", "on_reset", "callback", "func"]


def test_a_newer_generation_after_skip_sync_forces_the_sync(monkeypatch):
    """Generation 2 only lost workers, but 3 (which may add one: it syncs first thing) was
    published before the reset joined: the survivors must sync too."""
    log = interrupted_by_rank0(monkeypatch, (1, 2, True), joined_after_reset=3)
    assert log == ["sync", "func", "reset", "on_reset", "callback", "sync", "func"]


# ---- State: callbacks, commit, check_host_updates ----------------------------------------------

def test_reset_callbacks_run_in_order():
    state = common_elastic.ObjectState(bcast_object=lambda o: o, get_rank=lambda: 0)
    seen = []
    state.register_reset_callbacks([lambda: seen.append(1), lambda: seen.append(2)])
    state.register_reset_callbacks([lambda: seen.append(3)])
    state.on_reset()
    assert seen == [1, 2, 3]


def fake_runtime(monkeypatch, enabled, generation=None, calls=None):
    calls = [] if calls is None else calls
    monkeypatch.setattr(basics, "elastic_enabled", lambda: enabled)
    monkeypatch.setattr(basics, "elastic_generation",
                        lambda: calls.append("generation") or generation)
    monkeypatch.setattr(basics, "elastic_committed", lambda: calls.append("committed"))


def test_check_host_updates_raises_on_a_newer_generation(monkeypatch):
    sent = []

    state = common_elastic.ObjectState(bcast_object=lambda o: sent.append(o) or o,
                                       get_rank=lambda: 0, epoch=1)
    fake_runtime(monkeypatch, True, (1, 2, True))
    with pytest.raises(HostsUpdatedInterrupt) as info:
        state.check_host_updates()
    assert info.value.skip_sync is True and sent == [(1, 2, True)]
    assert info.value.generation == 2  # what skip_sync was decided for
    fake_runtime(monkeypatch, True, (2, 3, False))
    with pytest.raises(HostsUpdatedInterrupt) as info:
        state.check_host_updates()
    assert info.value.skip_sync is False
    fake_runtime(monkeypatch, True, (3, 3, False))
    state.check_host_updates()  # up to date


def test_check_host_updates_follows_rank_0(monkeypatch):
    """Every rank decides as rank 0 does (the broadcast's answer), whatever it saw itself."""
    rank0_view = [(4, 5, False)]
    state = common_elastic.ObjectState(bcast_object=lambda obj: rank0_view[0],
                                       get_rank=lambda: 1)
    fake_runtime(monkeypatch, True, (4, 4, False))
    with pytest.raises(HostsUpdatedInterrupt):
        state.check_host_updates()
    rank0_view[0] = (4, 4, False)
    fake_runtime(monkeypatch, True, (4, 5, True))
    state.check_host_updates()


def test_check_host_updates_outside_elastic_jobs_never_raises(monkeypatch):
    state = common_elastic.ObjectState(bcast_object=None, get_rank=lambda: 0)  # no collective
    fake_runtime(monkeypatch, False)
    state.check_host_updates()


def test_commit_saves_then_checks(monkeypatch):
    state = common_elastic.ObjectState(bcast_object=lambda o: o, get_rank=lambda: 0, epoch=0)
    calls = []
    fake_runtime(monkeypatch, True, (0, 1, False), calls)
    saved = state.save
    monkeypatch.setattr(state, "save", lambda: calls.append("save") or saved())
    state.epoch = 5
    with pytest.raises(HostsUpdatedInterrupt):
        state.commit()
    # The launcher hears of the commit after the save (a shrink trusts this worker's state).
    assert calls == ["save", "committed", "generation"]
    state.epoch = 6
    state.restore()
    assert state.epoch == 5


def test_commit_outside_an_elastic_job_tells_no_launcher(monkeypatch):
    state = common_elastic.ObjectState(bcast_object=lambda o: o, get_rank=lambda: 0, epoch=0)
    calls = []
    fake_runtime(monkeypatch, False, None, calls)
    state.commit()
    assert calls == []


def test_runtime_answers_outside_an_elastic_job(hvd):
    if os.environ.get("HVD_ELASTIC", "0") not in ("", "0"):
        pytest.skip("this job is elastic")
    assert basics.elastic_enabled() is False
    with pytest.raises(RuntimeError):
        basics.elastic_generation()
    with pytest.raises(RuntimeError, match="not an elastic job"):
        basics.elastic_committed()
    state = torch_elastic.ObjectState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
    state.check_host_updates()


def test_missing_elastic_abi_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(basics, "lib", object())  # a libhvd.so from before elastic mode
    with pytest.raises(RuntimeError, match="no elastic support.*hvd_elastic_enabled.*rebuild"):
        basics.elastic_enabled()
    with pytest.raises(RuntimeError, match="no elastic support.*hvd_elastic_generation"):
        basics.elastic_generation()
    monkeypatch.setattr(basics, "_warned_no_commit_note", False)
    with pytest.warns(UserWarning, match="lacks hvd_elastic_committed; rebuild"):
        basics.elastic_committed()  # a commit goes on without the note


# ---- ObjectState -------------------------------------------------------------------------------

def test_object_state_saves_and_restores_copies():
    history = [1]
    state = common_elastic.ObjectState(bcast_object=lambda o: o, get_rank=lambda: 0, epoch=0,
                                       history=history)
    assert state.epoch == 0 and state.history is history  # the objects given, as Horovod
    state.epoch = 3
    state.history.append(2)
    state.restore()
    assert state.epoch == 0 and state.history == [1]
    state.history.append(9)  # in place, after a restore: the saved value stays
    state.restore()
    assert state.history == [1]
    state.history.append(4)
    state.save()
    state.history.append(5)
    state.restore()
    assert state.history == [1, 4]


def test_object_state_sync_broadcasts_rank_0(hvd):
    r = hvd.rank()
    state = torch_elastic.ObjectState(bcast_object=hvd.broadcast_object, get_rank=hvd.rank,
                                      epoch=r, names=["rank%d" % r])
    state.epoch = 100 + r  # uncommitted: replaced by rank 0's committed value everywhere
    state.sync()
    assert state.epoch == 0 and state.names == ["rank0"]
    state.epoch = 7 + r
    state.save()
    state.sync()
    assert state.epoch == 7


# ---- TorchState --------------------------------------------------------------------------------

def test_torch_state_commit_tells_the_launcher_once_saved(monkeypatch, hvd):
    model, optimizer = make_model(hvd.rank())
    state = torch_elastic.TorchState(model, optimizer, epoch=1)
    calls = []
    fake_runtime(monkeypatch, True, (0, 0, False), calls)
    saved = state.save
    monkeypatch.setattr(state, "save", lambda: calls.append("save") or saved())
    state.commit()
    assert calls == ["save", "committed", "generation"]


def test_torch_state_save_restore(hvd):
    model, optimizer = make_model(hvd.rank())
    train_step(model, optimizer)
    state = torch_elastic.TorchState(model, optimizer, epoch=1)
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    momentum = optimizer.state_dict()["state"][0]["momentum_buffer"].clone()
    train_step(model, optimizer, scale=3.0)
    state.epoch = 2
    state.restore()
    for k, v in model.state_dict().items():
        assert_equal(v, committed[k], "restored %s" % k)
    assert_equal(optimizer.state_dict()["state"][0]["momentum_buffer"], momentum, "momentum")
    assert state.epoch == 1 and state.model is model and state.optimizer is optimizer
    train_step(model, optimizer)
    state.epoch = 3
    state.commit()  # not an elastic job: saves, never raises
    after = {k: v.clone() for k, v in model.state_dict().items()}
    train_step(model, optimizer)
    state.restore()
    for k, v in model.state_dict().items():
        assert_equal(v, after[k], "restored after commit %s" % k)
    assert state.epoch == 3


def test_torch_state_sync_takes_rank_0s(hvd):
    model, optimizer = make_model(hvd.rank())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_step(model, optimizer, scale=float(hvd.rank() + 1))
    for _ in range(hvd.rank()):
        scheduler.step()
    state = torch_elastic.TorchState(model, optimizer, scheduler=scheduler, batch=hvd.rank())
    state.sync()
    for name, v in model.state_dict().items():
        assert_equal(v, hvd.broadcast(v, root_rank=0, name="check." + name), name)
    buf = optimizer.state_dict()["state"][0]["momentum_buffer"]
    assert_equal(buf, hvd.broadcast(buf, root_rank=0, name="check.momentum"), "momentum")
    assert scheduler.last_epoch == 0 and state.batch == 0


def test_torch_state_tracks_an_assigned_model(hvd):
    model, optimizer = make_model(0)
    state = torch_elastic.TorchState(model, optimizer)
    other, _ = make_model(1)
    state.model = other
    assert state.model is other
    saved = {k: v.clone() for k, v in other.state_dict().items()}
    with torch.no_grad():
        other.weight.zero_()
    state.restore()
    assert_equal(other.weight, saved["weight"], "the assigned model was saved and restored")


# ---- a real reset: hvd.shutdown(); hvd.init() inside run() -------------------------------------

def test_run_resets_hvd_and_restores_the_model(hvd):
    n = hvd.size()
    model, optimizer = make_model(hvd.rank())
    state = torch_elastic.TorchState(model, optimizer, steps=0)
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @torch_elastic.run
    def train(state):
        calls.append(1)
        # Every rank has synced to rank 0's model: the same weights everywhere.
        w = state.model.weight.detach().clone()
        assert_equal(hvd.broadcast(w, root_rank=0, name="reset.check.%d" % len(calls)), w,
                     "synced weights")
        if len(calls) == 1:
            train_step(state.model, state.optimizer)
            state.steps = 1
            hvd.barrier()  # every rank done with its collectives before any shuts down
            raise HorovodInternalError("injected failure")
        return state.steps, hvd.allreduce(torch.ones(1), op=hvd.Sum).item()

    try:
        steps, total = train(state)
    finally:
        # As the session fixture left hvd (dynamic process sets), whatever happened.
        if hvd.is_initialized():
            hvd.barrier()
            hvd.shutdown()
        hvd.init(process_sets="dynamic")
    assert len(calls) == 2 and resets == [n]
    assert steps == 0 and total == float(n)  # the uncommitted step was undone


@pytest.mark.skipif(not os.environ.get("HVD_TEST_COMPAT_DIR"),
                    reason="HVD_TEST_COMPAT_DIR not set (the ctest sets it)")
def test_horovod_elastic_names():
    sys.path.append(os.environ["HVD_TEST_COMPAT_DIR"])
    try:
        import horovod.torch as hvd2
        import horovod.common.elastic as compat_common
        from horovod.torch.elastic import ElasticSampler, TorchState, run
        from horovod.torch.elastic.state import TorchState as state_cls
        from horovod.torch.elastic.sampler import ElasticSampler as sampler_cls
    finally:
        sys.path.remove(os.environ["HVD_TEST_COMPAT_DIR"])
    assert compat_common is common_elastic and hvd2.elastic is torch_elastic
    assert TorchState is state_cls is torch_elastic.TorchState
    assert ElasticSampler is sampler_cls is torch_elastic.ElasticSampler
    assert run is torch_elastic.run
    assert hvd2.elastic.ObjectState is common_elastic.ObjectState
    assert hvd2.elastic.State is common_elastic.State
