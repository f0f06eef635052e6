"""TorchRL's ``spec.space``: ``.low`` / ``.high`` of a Bounded spec, ``.n`` of the
categorical ones."""

from __future__ import annotations

import pytest
import torch
from rl_envs import (
    Binary,
    BinaryBox,
    Bounded,
    BoxList,
    Categorical,
    CategoricalBox,
    ContinuousBox,
    GymEnv,
    MultiCategorical,
    OneHot,
)


def test_bounded_space_has_the_bounds_broadcast_to_the_shape():
    spec = Bounded(torch.tensor([-1.0, -2.0]), 3.0, shape=(4, 2))
    box = spec.space
    assert isinstance(box, ContinuousBox)
    torch.testing.assert_close(box.low, torch.tensor([[-1.0, -2.0]] * 4))
    torch.testing.assert_close(box.high, torch.full((4, 2), 3.0))


def test_bounded_space_follows_to_and_expand():
    spec = Bounded(-1.0, 1.0, shape=(2,)).expand(3, 2).to("cpu")
    assert spec.space.low.shape == (3, 2) and spec.space.high.dtype == torch.float32


@pytest.mark.parametrize("spec", [Categorical(5, shape=(2,)), OneHot(5, shape=(2, 5))])
def test_categorical_and_one_hot_space_n(spec):
    assert spec.space == CategoricalBox(5)
    assert spec.space.n == 5


def test_space_of_a_gym_env_action_spec():
    env = GymEnv("Pendulum-v1", num_envs=2)
    try:
        space = env.action_spec.space
        assert float(space.low.min()) == -2.0 and float(space.high.max()) == 2.0
    finally:
        env.close()


def test_multi_categorical_space_is_one_box_per_choice():
    space = MultiCategorical([2, 3, 5], shape=(4, 3)).space
    assert isinstance(space, BoxList) and len(space) == 3
    assert [box.n for box in space] == [2, 3, 5] and space[1] == CategoricalBox(3)


def test_binary_space_n():
    assert Binary(4, shape=(2, 4)).space == BinaryBox(4)
