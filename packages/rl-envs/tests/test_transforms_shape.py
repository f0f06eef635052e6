"""UnsqueezeTransform, PermuteTransform, FlattenObservation, DTypeCastTransform, ActionMask
and the old *TensorSpec names."""

from __future__ import annotations

import pytest
import torch
from rl_envs import (
    BoundedTensorSpec,
    Categorical,
    Composite,
    CompositeSpec,
    DiscreteTensorSpec,
    DTypeCastTransform,
    EnvBase,
    FlattenObservation,
    GymEnv,
    InvalidActionError,
    PermuteTransform,
    SpecError,
    TransformedEnv,
    Unbounded,
    UnboundedContinuousTensorSpec,
    UnboundedDiscreteTensorSpec,
    UnsqueezeTransform,
)
from rl_envs.transforms import ActionMask
from tensordict import TensorDict


def _pair(transform, seed=3):
    raw, env = (GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
                for _ in range(2))
    raw.set_seed(seed)
    tenv = TransformedEnv(env, transform)
    tenv.set_seed(seed)
    actions = torch.randint(0, 2, (2, 40), generator=torch.Generator().manual_seed(seed))
    out = []
    for e in (raw, tenv):
        td = e.reset()
        for t in range(40):
            td["action"] = actions[:, t]
            td, root = e.step_and_maybe_reset(td)
            out.append(td["next", "observation"].clone())
            td = root
        e.close()
    return torch.stack(out[:40]), torch.stack(out[40:]), tenv


def test_view_transforms_match_the_raw_observations_across_resets() -> None:
    chain = [UnsqueezeTransform(-2, in_keys=["observation"]),
             PermuteTransform((-1, -2), in_keys=["observation"]),
             FlattenObservation(-2, -1, in_keys=["observation"], out_keys=["flat"])]
    raw, got, env = _pair(chain[0])
    assert got.shape == (40, 2, 1, 4) and torch.equal(got.squeeze(-2), raw)
    assert env.observation_spec["observation"].shape == (2, 1, 4)
    from rl_envs import Compose
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), Compose(*chain))
    td = env.rollout(5, break_when_any_done=False)
    assert td["observation"].shape == (2, 5, 4, 1)
    assert torch.equal(td["flat"], td["observation"].flatten(-2, -1))
    assert env.observation_spec["flat"].shape == (2, 4)
    env.close()


def test_dtype_cast_matches_and_keeps_bounds() -> None:
    raw, got, env = _pair(DTypeCastTransform(torch.float32, torch.float64))
    assert got.dtype == torch.float64 and torch.equal(got, raw.double())
    spec = env.observation_spec["observation"]
    assert spec.dtype == torch.float64 and spec.high.dtype == torch.float64
    with pytest.raises(TypeError, match="dtype_in"):
        TransformedEnv(GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
                       DTypeCastTransform(torch.float64, torch.float32, in_keys=["observation"]))


def test_bad_dims_are_refused_with_the_argument() -> None:
    with pytest.raises(ValueError, match="allow_positive_dim"):
        UnsqueezeTransform(0, in_keys=["observation"])
    with pytest.raises(ValueError, match="permutation"):
        PermuteTransform((-1, -1), in_keys=["observation"])
    with pytest.raises(ValueError, match="in_keys"):
        FlattenObservation(-2, -1, in_keys=[])
    assert FlattenObservation(-2, -1).in_keys == ["pixels"]  # TorchRL's IMAGE_KEYS
    spec = Composite(observation=Unbounded((2, 3, 4)), shape=(2,))
    positive = UnsqueezeTransform(0, allow_positive_dim=True, in_keys=["observation"])
    assert positive.transform_observation_spec(spec)["observation"].shape == (2, 1, 3, 4)


class _Masked(EnvBase):
    """Three actions; the mask forbids action 2 on every sub-env."""

    def __init__(self) -> None:
        super().__init__(batch_size=(2,))
        self.observation_spec = Composite(
            observation=Unbounded((2, 1)),
            action_mask=Categorical(2, (2, 3), dtype=torch.bool), shape=(2,))
        self.action_spec = Categorical(3, shape=(2,))

    def _obs(self) -> TensorDict:
        mask = torch.tensor([True, True, False]).expand(2, 3).clone()
        return TensorDict(observation=torch.zeros(2, 1), action_mask=mask, batch_size=(2,))

    def _reset(self, td):
        return self._obs()

    def _step(self, td):
        out = self._obs()
        out["reward"] = torch.zeros(2, 1)
        out["done"] = torch.zeros(2, 1, dtype=torch.bool)
        return out


def test_action_mask_refuses_a_masked_action_before_the_env_steps() -> None:
    env = TransformedEnv(_Masked(), ActionMask())
    td = env.reset()
    td["action"] = torch.tensor([0, 1])
    env.step(td)
    td["action"] = torch.tensor([1, 2])
    with pytest.raises(InvalidActionError, match=r"masked-out action .*\[\[1\]\]"):
        env.step(td)
    with pytest.raises(SpecError, match="mask_key"):
        TransformedEnv(_Masked(), ActionMask(mask_key="legal"))


def test_old_spec_names_build_the_current_specs() -> None:
    assert BoundedTensorSpec(-1.0, 1.0, (3,)).shape == (3,)
    assert UnboundedContinuousTensorSpec((2,)).dtype == torch.float32
    assert UnboundedDiscreteTensorSpec((2,)).dtype == torch.int64
    assert DiscreteTensorSpec(4, (2,)).n == 4
    assert isinstance(CompositeSpec(a=Unbounded((1,))), Composite)
