"""VecNorm: the decayed statistics against numpy, resets, freezing, state and shared memory.

The cross-process test runs real spawned ``ParallelEnv`` workers; they re-import this
file by module name to build their env (the tests directory is put on ``sys.path``
while they start, as in ``test_envs_batched``).
"""

from __future__ import annotations

import functools
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    Compose,
    GymEnv,
    ParallelEnv,
    SpecError,
    StepCounter,
    TransformedEnv,
    VecNorm,
    check_env_specs,
)

try:
    from ._pixels import PixelEnv, ones_policy
    from ._processes import importable_by_workers, spawnable
except ImportError:  # a spawned worker imports this file as a top-level module
    from _pixels import PixelEnv, ones_policy
    from _processes import importable_by_workers, spawnable


class RefStats:
    """The reference: float64 numpy sums, updated one batch at a time."""

    def __init__(self, shape, decay, eps):
        self.s, self.q, self.c = np.zeros(shape), np.zeros(shape), 0.0
        self.decay, self.eps = decay, eps

    def update(self, x):
        x = x.reshape(-1, *self.s.shape).astype(np.float64)
        self.s = self.decay * self.s + x.sum(0)
        self.q = self.decay * self.q + (x**2).sum(0)
        self.c = self.decay * self.c + x.shape[0]

    def norm(self, x):
        mean = self.s / self.c
        return (x - mean) / np.sqrt(np.maximum(self.q / self.c - mean**2, self.eps))


def ref_vecnorm(data, key, decay, eps, root=True):
    """Normalised root/next values of ``key`` for a rollout that started with a full reset."""
    raw_n = data["next", key].numpy()
    raw_r = data[key].numpy() if root else None
    ref = RefStats(raw_n.shape[2:], decay, eps)
    if root:
        ref.update(raw_r[:, 0])
    out_r, out_n = np.empty_like(raw_n, dtype=np.float64), np.empty_like(raw_n, dtype=np.float64)
    for t in range(raw_n.shape[1]):
        if root:
            out_r[:, t] = ref.norm(raw_r[:, t])
        ref.update(raw_n[:, t])
        out_n[:, t] = ref.norm(raw_n[:, t])
    return out_r, out_n, ref


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 4),
    shape=st.sampled_from([(3,), (2, 3), (1,)]),
    decay=st.sampled_from([1.0, 0.99, 0.9]),
    limit=st.integers(1, 4),
)
def test_vecnorm_matches_numpy_across_auto_resets(n, shape, decay, limit):
    t = VecNorm(["observation", "reward"], ["norm", "rnorm"], decay=decay)
    env = TransformedEnv(PixelEnv(n, shape, limit=limit, dtype=torch.float32), t)
    data = env.rollout(8, policy=ones_policy(n), break_when_any_done=False)
    ref_r, ref_n, ref = ref_vecnorm(data, "observation", decay, 1e-4)
    np.testing.assert_allclose(data["norm"].numpy(), ref_r, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(data["next", "norm"].numpy(), ref_n, rtol=1e-4, atol=1e-4)
    _, rew_n, _ = ref_vecnorm(data, "reward", decay, 1e-4, root=False)
    np.testing.assert_allclose(data["next", "rnorm"].numpy(), rew_n, rtol=1e-4, atol=1e-4)
    state = t.state_dict()
    np.testing.assert_allclose(state["observation_sum"].numpy(), ref.s, rtol=1e-10)
    np.testing.assert_allclose(state["observation_count"].item(), ref.c, rtol=1e-10)


def test_vecnorm_partial_reset_counts_only_reset_rows():
    t = VecNorm(decay=1.0)
    env = TransformedEnv(PixelEnv(3, (2,), limit=100, dtype=torch.float32), t)
    td = env.reset()
    _, td = env.step_and_maybe_reset(td.set("action", torch.ones(3, dtype=torch.int64)))
    assert t.state_dict()["observation_count"].item() == 6  # 3 reset + 3 stepped
    out = env.reset(td.set("_reset", torch.tensor([True, False, False])))
    assert t.state_dict()["observation_count"].item() == 7
    mean, std = t.mean_std()
    raw = env.base_env.buffers()[0]["observation"][0]
    assert torch.allclose(out["observation"][0], ((raw - mean) / std).float(), atol=1e-6)


def test_vecnorm_with_transform_truncation_and_specs():
    env = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=3), Compose(StepCounter(4), VecNorm(decay=0.99))
    )
    check_env_specs(env, steps=9, seed=0)
    spec = env.observation_spec["observation"]
    assert spec.shape == (3, 3) and spec.dtype == torch.float32 and not hasattr(spec, "low")
    env.close()


def test_vecnorm_freeze_and_frozen_copy_share_statistics():
    train = VecNorm(decay=1.0)
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), train)
    env.rollout(10)
    count = train.state_dict()["observation_count"].item()
    assert count == 22
    train.freeze()
    data = env.rollout(5)
    assert train.state_dict()["observation_count"].item() == count  # frozen: no update
    mean, std = train.mean_std()
    raw = env.base_env.rollout(1)["observation"]  # any raw obs: the map is fixed now
    assert torch.isfinite(data["observation"]).all() and raw.shape == (2, 1, 3)
    train.unfreeze()
    evaluation = train.frozen_copy()
    assert evaluation.frozen and not train.frozen
    eval_env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), evaluation)
    eval_env.rollout(5)
    assert train.state_dict()["observation_count"].item() == count  # eval never updates
    env.rollout(3)  # training goes on: the eval copy reads the same tensors
    assert evaluation.state_dict()["observation_count"].item() == count + 8
    e_mean, e_std = evaluation.mean_std()
    t_mean, t_std = train.mean_std()
    assert torch.equal(e_mean, t_mean) and torch.equal(e_std, t_std)
    assert not torch.equal(e_mean, mean)
    env.close()
    eval_env.close()


def test_vecnorm_state_dict_round_trip_and_shape_errors():
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), VecNorm(decay=1.0))
    env.rollout(4)
    state = env.transform[0].state_dict()
    fresh = VecNorm(decay=1.0)
    fresh.load_state_dict(state)  # before any env: allocates from the state
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, state[k]) and fresh._stats[k].is_shared()
    env2 = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), fresh)
    env2.rollout(2)
    assert fresh.state_dict()["observation_count"].item() == state["observation_count"].item() + 6
    bad = dict(state, observation_sum=torch.zeros(4, dtype=torch.float64))
    with pytest.raises(
        SpecError, match=r"'observation_sum': expected shape \(3,\), received \(4,\)"
    ):
        fresh.load_state_dict(bad)
    assert fresh.state_dict()["observation_ssq"].shape == (3,)  # nothing was half-loaded
    with pytest.raises(KeyError, match="missing keys"):
        fresh.load_state_dict({"observation_sum": state["observation_sum"]})
    with pytest.raises(KeyError, match="unexpected keys"):
        fresh.load_state_dict(dict(state, reward_sum=torch.zeros(1)))
    with pytest.raises(
        SpecError, match=r"VecNorm: 'observation': the statistics have shape \(4,\).* have \(3,\)"
    ):
        TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), VecNorm(shapes=[(4,)]))
    with pytest.raises(
        SpecError, match="'observation' must be floating point, received torch.uint8"
    ):
        TransformedEnv(PixelEnv(2, (4, 4, 3)), VecNorm())
    with pytest.raises(ValueError, match="decay"):
        VecNorm(decay=0.0)
    env.close()
    env2.close()


def test_vecnorm_statistics_are_shared_memory_through_pickling():
    t = VecNorm(shapes=[(3,)])
    assert all(v.is_shared() for v in t._stats.values())
    copy = ForkingPickler.loads(ForkingPickler.dumps(t))  # what a spawned process receives
    copy._stats["observation_sum"] += 5.0
    assert t.state_dict()["observation_sum"].tolist() == [5.0, 5.0, 5.0]


# -- across real worker processes -------------------------------------------------------
def make_normalised_cartpole(vecnorm: VecNorm) -> TransformedEnv:
    return TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                 categorical_action_encoding=True), vecnorm)


importable_by_workers(__name__, make_normalised_cartpole)


def test_vecnorm_shared_by_parallel_env_workers():
    t = VecNorm(decay=1.0, shapes=[(4,)])  # allocated (shared) before it reaches the workers
    with spawnable():
        env = ParallelEnv(2, functools.partial(make_normalised_cartpole, t))
    try:
        data = env.rollout(20, break_when_any_done=False)
    finally:
        env.close()
    count = t.state_dict()["observation_count"].item()
    per_worker = 2 + 20 * 2  # one reset and 20 steps of 2 sub-envs
    # both workers wrote into this process's tensors (a lost concurrent update is allowed)
    assert per_worker < count <= 2 * per_worker
    mean, std = t.mean_std()
    assert torch.isfinite(mean).all() and (std > 0).all()
    assert data["observation"].shape == (2, 2, 20, 4)


@pytest.mark.parametrize("decay", [1.0, 0.99])
@pytest.mark.parametrize("rows", [1, 3])
def test_vecnorm_numpy_update_is_the_generic_sums_bit_for_bit(decay, rows):
    """The numpy update's shortcuts (no multiply by a decay of 1, one row added as is) give
    the same bits as scaling by the decay and summing the rows."""
    from rl_envs._transforms_vecnorm import _NumpyStats

    rng = np.random.default_rng(1)
    s, q, c = np.zeros(5), np.zeros(5), np.zeros(())
    stats = _NumpyStats(s, q, c, torch.float32)
    want = [np.zeros(5), np.zeros(5), np.zeros(())]
    for _ in range(50):
        x = rng.normal(0.0, 2.0, size=(rows, 5)).astype(np.float32)
        stats.update(x, decay)
        flat = x.astype(np.float64)
        want = [want[0] * decay + np.add.reduce(flat, 0),
                want[1] * decay + np.add.reduce(np.square(flat), 0), want[2] * decay + rows]
        for got, ref in zip((s, q, c), want, strict=True):
            assert got.tobytes() == np.asarray(ref, dtype=np.float64).tobytes()
