"""The numpy path of the element-wise transforms (CPU leaves) against their torch path.

``VecNorm``, ``ClipTransform``, ``SignTransform`` and ``RewardScaling`` write in numpy when
every bound leaf is on the CPU; the torch path serves other devices. Here both run on the
same seeded rollouts (the torch path forced by dropping the bound numpy views) and must
give the same values bit for bit, statistics included, across auto-resets of some
sub-envs in the middle of the batch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rl_envs import (
    ClipTransform,
    Compose,
    GymEnv,
    RewardScaling,
    SignTransform,
    StepCounter,
    TransformedEnv,
    VecNorm,
)


def make_env(torch_path: bool) -> TransformedEnv:
    env = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=3),
        Compose(
            StepCounter(max_steps=7),  # sub-envs end at different steps: mid-batch resets
            VecNorm(["observation", "reward"], ["norm", "rnorm"], decay=0.99, eps=1e-2),
            ClipTransform(["norm"], low=-0.5, high=0.5),
            SignTransform(["rnorm"], ["rsign"]),
            RewardScaling(loc=1.0, scale=-2.0, in_keys=["reward"], out_keys=["rscaled"]),
        ),
    )
    env.set_seed(0)
    env.reset()  # binds the transforms to the env's leaves
    if torch_path:
        for transform in env.transform[1:]:
            transform._np_io = [None] * len(transform._np_io)
            transform._np_stats = {}
    return env


def test_numpy_path_is_bound_on_the_cpu():
    env = make_env(torch_path=False)
    try:
        vecnorm, clip = env.transform[1], env.transform[2]
        assert all(views is not None for views in vecnorm._np_io)
        assert set(vecnorm._np_stats) == {"observation", "reward"}
        assert clip._np_io[0] is not None
    finally:
        env.close()


def test_numpy_path_equals_the_torch_path_bit_for_bit():
    actions = torch.rand(40, 3, 1, generator=torch.Generator().manual_seed(0)) * 4 - 2
    out = {}
    for torch_path in (False, True):
        env = make_env(torch_path)
        try:
            rows = []
            for t in range(len(actions)):
                root, nxt = env.buffers()
                env.fast_step(actions[t])
                rows.append(torch.cat([nxt.get(k).reshape(3, -1) for k in
                                       ("norm", "rnorm", "rsign", "rscaled")]
                                      + [root.get("norm")], 1).clone())
            stats = env.transform[1].state_dict()
        finally:
            env.close()
        out[torch_path] = torch.stack(rows), stats
    (np_rows, np_stats), (t_rows, t_stats) = out[False], out[True]
    assert np_rows.shape[0] == len(actions)
    assert torch.equal(np_rows, t_rows)
    assert np_stats.keys() == t_stats.keys()
    for name in np_stats:
        torch.testing.assert_close(np_stats[name], t_stats[name], rtol=1e-15, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vecnorm_numpy_stats_follow_the_formula(dtype):
    """The bound statistics against the module docstring's formulas, in numpy."""
    env = make_env(torch_path=False)
    try:
        vecnorm = env.transform[1]
        bound = vecnorm._np_stats["observation"]
        x = np.arange(6, dtype=dtype).reshape(2, 3) / 7
        s0, q0, c0 = bound.s.copy(), bound.q.copy(), float(bound.c)
        bound.update(x, 0.5)
        np.testing.assert_allclose(bound.s, 0.5 * s0 + x.astype(np.float64).sum(0), rtol=1e-15)
        np.testing.assert_allclose(bound.q, 0.5 * q0 + (x.astype(np.float64) ** 2).sum(0),
                                   rtol=1e-15)
        assert float(bound.c) == 0.5 * c0 + 2
        bound.refresh(1e-2)
        mean = bound.s / float(bound.c)
        std = np.sqrt(np.maximum(bound.q / float(bound.c) - mean**2, 1e-2))
        np.testing.assert_array_equal(bound.mean, mean.astype(np.float32))
        np.testing.assert_array_equal(bound.std, std.astype(np.float32))
        torch_mean, torch_std = vecnorm.mean_std("observation")
        np.testing.assert_array_equal(torch_mean.numpy(), mean)
        np.testing.assert_array_equal(torch_std.numpy(), std)
    finally:
        env.close()


def test_pickled_state_drops_the_views_and_rebuilds_them():
    """Numpy views would pickle as copies of the leaves: the state leaves them out and a
    restored transform views its own (restored) leaves."""
    env = make_env(torch_path=False)
    try:
        state = env.transform[2].__getstate__()
        assert "_np_io" not in state and "_done_np" not in state
        clip = ClipTransform.__new__(ClipTransform)
        clip.__setstate__(state)
        _, src_n, dst_n, _, dst_r = clip._io[0]
        views = clip._np_io[0]
        assert np.shares_memory(views[1], src_n.numpy())
        assert np.shares_memory(views[2], dst_n.numpy())
        assert np.shares_memory(views[4], dst_r.numpy())
        assert np.shares_memory(clip._done_np, clip._done.numpy())
    finally:
        env.close()
