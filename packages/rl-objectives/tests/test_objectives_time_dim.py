"""Where the estimators find time: ``time_dim``, else the dim named ``"time"``, else the last."""

from __future__ import annotations

import pytest
import torch
from rl_objectives.value import GAE, TD1Estimator, TDLambdaEstimator, marked_time_dim
from tensordict import TensorDict


def _rollout(envs: int = 3, steps: int = 6) -> TensorDict:
    """A ``[B, T]`` rollout with values and a done in the middle of each row."""
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(envs, steps, 1, dtype=torch.bool)
    done[:, steps // 2] = True
    return TensorDict(
        {
            "state_value": torch.randn(envs, steps, 1, generator=g),
            "next": {
                "state_value": torch.randn(envs, steps, 1, generator=g),
                "reward": torch.randn(envs, steps, 1, generator=g),
                "done": done,
                "terminated": done.clone(),
            },
        },
        [envs, steps],
    )


ESTIMATORS = [
    lambda **kw: GAE(gamma=0.9, lmbda=0.8, **kw),
    lambda **kw: TDLambdaEstimator(gamma=0.9, lmbda=0.8, **kw),
    lambda **kw: TD1Estimator(gamma=0.9, **kw),
]


@pytest.mark.parametrize("make", ESTIMATORS)
def test_a_time_major_batch_named_as_torchrl_names_it_needs_no_time_dim(make):
    # [T, B] with time named "time" (a time-major rollout): the same advantages as the
    # [B, T] batch, without telling the estimator where time is
    batch = _rollout()
    expected = make()(batch.clone())["advantage"]
    time_major = batch.clone().permute(1, 0).contiguous().refine_names("time", None)
    got = make()(time_major)["advantage"]
    torch.testing.assert_close(got.transpose(0, 1), expected)
    # read unnamed, the same [T, B] batch has time last: other (wrong) advantages
    unnamed = batch.clone().permute(1, 0).contiguous()
    assert not torch.allclose(make()(unnamed)["advantage"].transpose(0, 1), expected)


@pytest.mark.parametrize("make", ESTIMATORS)
def test_time_dim_wins_over_the_name(make):
    batch = _rollout()
    expected = make()(batch.clone())["advantage"]
    misnamed = batch.clone().refine_names("time", None)  # a wrong mark, overridden
    torch.testing.assert_close(make(time_dim=1)(misnamed)["advantage"], expected)


def test_marked_time_dim_reads_the_name_else_the_last_dim():
    batch = _rollout()
    assert marked_time_dim(batch) == 1
    assert marked_time_dim(batch.clone().refine_names("time", None)) == 0
    assert marked_time_dim(batch.clone().refine_names(None, "time")) == 1
    flat = TensorDict({"r": torch.zeros(4)}, [4])
    assert marked_time_dim(flat) == 0
