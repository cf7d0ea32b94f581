"""fastppo._blas: the MLP's GEMMs hold the BLAS at one thread below a size, and restore it."""

from __future__ import annotations

import multiprocessing as mp
import threading
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from fastppo import _blas, _dispatch
from fastppo.kernels import mlp as K
from fastppo.nn import ActorCritic, Adam
from fastppo.ppo import PPOConfig, RolloutBatch, ppo_update

HELD = (_blas.THREADED_FROM + _dispatch.BLAS_PARALLEL_MIN) // 2


def blas_threads() -> list[int]:
    # the libraries the hold controls (those loaded when it first ran)
    _blas._controllers()
    return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]


@pytest.fixture
def two_threads():
    """Every BLAS at two threads for the test (and what it was, afterwards)."""
    _blas._controllers()
    with threadpool_limits(limits=2, user_api="blas"):
        if set(blas_threads()) != {2}:
            pytest.skip("this machine's BLAS cannot run two threads (one core)")
        yield


@pytest.mark.parametrize(
    ("macs", "held"),
    [
        (0, False),
        (_blas.THREADED_FROM - 1, False),
        (_blas.THREADED_FROM, True),
        (HELD, True),
        (_dispatch.BLAS_PARALLEL_MIN - 1, True),
        (_dispatch.BLAS_PARALLEL_MIN, False),
    ],
)
def test_call_holds_one_thread_only_inside_its_range(two_threads, macs, held):
    seen = _blas.call(macs, blas_threads)
    assert set(seen) == ({1} if held else {2})
    assert set(blas_threads()) == {2}


def test_restores_after_an_exception(two_threads):
    def boom() -> None:
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        _blas.call(HELD, boom)
    assert set(blas_threads()) == {2}
    assert _blas._depth == 0


def test_overlapping_holds_restore_once_the_last_one_leaves(two_threads):
    # An actor thread's hold outlives the learner's: the learner leaving must
    # not restore two threads under the actor, and the actor leaving restores.
    inside, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def actor_kernel() -> None:
        inside.set()
        release.wait(10)
        seen.append(blas_threads())

    t = threading.Thread(target=_blas.call, args=(HELD, actor_kernel))
    t.start()
    assert inside.wait(10)
    assert set(_blas.call(HELD, blas_threads)) == {1}
    assert set(blas_threads()) == {1}  # the actor still holds
    release.set()
    t.join(10)
    assert set(seen[0]) == {1}
    assert set(blas_threads()) == {2}


def _recording(monkeypatch, name: str) -> list[list[int]]:
    """Replace ``kernels.mlp.<name>`` by a wrapper that records the BLAS threads it ran with."""
    original = getattr(K, name)
    seen: list[list[int]] = []

    def wrapper(*args):
        seen.append(blas_threads())
        return original(*args)

    monkeypatch.setattr(K, name, wrapper)
    return seen


def test_policy_and_update_run_their_gemms_on_one_blas_thread(two_threads, monkeypatch):
    # CartPole shapes: 64x64, minibatch 256 -> 256 * 64 * 64 = 2**20 multiply-adds.
    p = ActorCritic((4,), "discrete", nvec=[2], hidden_sizes=(64, 64), seed=0)
    n = 256
    assert _blas.THREADED_FROM <= n * p._widest < _dispatch.BLAS_PARALLEL_MIN
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 4))
    fwd = _recording(monkeypatch, "policy_forward")
    ev = _recording(monkeypatch, "policy_evaluate")
    upd = _recording(monkeypatch, "ppo_update_kernel")
    p.act(obs)
    logp, _, v = p.evaluate(obs, rng.integers(0, 2, n))
    p.act(obs[:1])  # 4,096 multiply-adds: no BLAS threads it, no hold
    batch = RolloutBatch(
        obs=obs, actions=rng.integers(0, 2, n), logp=logp, advantages=rng.normal(size=n),
        returns=v, values=v, valid=np.ones(n, bool),
    )  # fmt: skip
    cfg = PPOConfig(batch_size=n, n_epochs=1)
    ppo_update(p, Adam(p.n_params, 1e-3, dtype=p.dtype), batch, cfg, rng)
    assert [set(s) for s in fwd] == [{1}, {2}]
    assert [set(s) for s in ev] == [{1}]
    assert [set(s) for s in upd] == [{1}]
    assert set(blas_threads()) == {2}


def test_a_child_forked_inside_a_hold_starts_without_it(two_threads):
    # The lock and the count start afresh in a forked child, so its own holds
    # neither wait for a parent thread's lock nor stack on the parent's count.
    def child(q) -> None:
        q.put((_blas._depth, _blas._lock.locked(), _blas.call(HELD, lambda: _blas._depth)))

    ctx = mp.get_context("fork")
    q = ctx.Queue()

    def fork_inside() -> None:
        # as if another thread were between a get and a set; Python 3.12+
        # warns about fork() in a process with threads (OpenBLAS's are running)
        with _blas._lock, warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            proc = ctx.Process(target=child, args=(q,))
            proc.start()
        proc.join(30)
        assert proc.exitcode == 0

    _blas.call(HELD, fork_inside)
    assert q.get(timeout=5) == (0, False, 1)
    assert set(blas_threads()) == {2}
