"""Exploration modules: annealing by frames, per-sub-env draws, inert when deterministic."""

from __future__ import annotations

import pytest
import torch
from rl_envs import Bounded, Categorical, OneHot
from rl_modules import (
    AdditiveGaussianModule,
    EGreedyModule,
    ExplorationType,
    OrnsteinUhlenbeckProcessModule,
    exploration_type,
    set_exploration_type,
)
from tensordict import TensorDict


def _actions(n: int, dtype=torch.long) -> TensorDict:
    return TensorDict(action=torch.zeros(n, dtype=dtype), batch_size=[n])


def test_epsilon_anneals_linearly_by_frames_and_stays_at_its_end():
    explore = EGreedyModule(
        Categorical(4, shape=(16,)), eps_init=1.0, eps_end=0.05, annealing_num_steps=1000
    )
    seen = []
    for _ in range(15):
        explore.step(100)  # one batch of 100 frames
        seen.append(round(float(explore.eps), 6))
    assert seen[:3] == [0.905, 0.81, 0.715]
    assert seen[9:] == [0.05] * 6
    assert "eps" in dict(explore.named_buffers())  # synced to workers with the weights


def test_epsilon_greedy_draws_per_sub_env():
    explore = EGreedyModule(Categorical(4), eps_init=0.3, eps_end=0.3, annealing_num_steps=1)
    changed = torch.stack([explore(_actions(1000))["action"] != 0 for _ in range(20)]).float()
    # a random action equals the greedy one 1/4 of the time: P(changed) = 0.3 * 3/4
    assert changed.mean().item() == pytest.approx(0.225, abs=0.01)
    per_call = changed.mean(1)
    assert bool(((per_call > 0.15) & (per_call < 0.3)).all())  # not all-or-nothing per call


def test_epsilon_greedy_one_hot_and_masked_random_actions():
    explore = EGreedyModule(OneHot(3, shape=(3,)), eps_init=1.0, eps_end=1.0, annealing_num_steps=1)
    td = TensorDict(action=torch.zeros(500, 3, dtype=torch.bool), batch_size=[500])
    td["action"][:, 0] = True
    out = explore(td)["action"]
    assert out.dtype == torch.bool and bool((out.sum(-1) == 1).all()) and out[:, 1:].any()
    masked = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=1.0, annealing_num_steps=1,
                           action_mask_key="action_mask")
    mask = torch.tensor([False, True, False, True]).expand(100_000, 4)
    draws = masked(_actions(100_000).set("action_mask", mask))["action"]
    assert set(draws.unique().tolist()) == {1, 3}


@pytest.mark.parametrize(
    "kind", [ExplorationType.DETERMINISTIC, ExplorationType.MODE, ExplorationType.MEAN]
)
def test_exploration_is_inert_unless_random(kind):
    spec = Bounded(-1.0, 1.0, shape=(2,))
    modules = [
        EGreedyModule(Categorical(4), eps_init=1.0, annealing_num_steps=1),
        AdditiveGaussianModule(spec, sigma_init=1.0),
        OrnsteinUhlenbeckProcessModule(spec),
    ]
    inputs = [
        _actions(64),
        TensorDict(action=torch.zeros(64, 2), batch_size=[64]),
        TensorDict(
            action=torch.zeros(64, 2), is_init=torch.ones(64, 1, dtype=torch.bool), batch_size=[64]
        ),
    ]
    with set_exploration_type(kind):
        assert exploration_type() is kind
        for module, td in zip(modules, inputs, strict=True):
            assert bool((module(td.clone())["action"] == 0).all())
    with set_exploration_type(ExplorationType.RANDOM):
        for module, td in zip(modules, inputs, strict=True):
            assert bool((module(td.clone())["action"] != 0).any())


def test_additive_gaussian_noise_scale_and_projection():
    noise = AdditiveGaussianModule(Bounded(-10.0, 10.0, shape=(2,)), sigma_init=2.0, sigma_end=0.5,
                                   annealing_num_steps=100)
    out = noise(TensorDict(action=torch.zeros(100_000, 2), batch_size=[100_000]))["action"]
    assert out.std().item() == pytest.approx(2.0, rel=0.02)
    noise.step(100)
    out = noise(TensorDict(action=torch.zeros(100_000, 2), batch_size=[100_000]))["action"]
    assert out.std().item() == pytest.approx(0.5, rel=0.02)
    tight = AdditiveGaussianModule(Bounded(-0.1, 0.1, shape=(2,)), sigma_init=5.0)
    assert bool(
        (tight(TensorDict(action=torch.zeros(64, 2), batch_size=[64]))["action"].abs() <= 0.1).all()
    )


def test_ou_noise_restarts_only_where_is_init():
    # sigma = 0: the process is deterministic, x_{t+1} = x_t + theta (mu - x_t) dt = x_t / 2
    ou = OrnsteinUhlenbeckProcessModule(Bounded(-5.0, 5.0, shape=(1,)), eps_init=1.0, eps_end=1.0,
                                        theta=1.0, mu=0.0, sigma=0.0, dt=0.5, x0=1.0)
    is_init = torch.tensor([[True], [True], [True]])
    seen = []
    for t in range(4):
        td = TensorDict(action=torch.zeros(3, 1), is_init=is_init, batch_size=[3])
        seen.append(ou(td)["action"].squeeze(-1).tolist())
        is_init = torch.tensor([[False], [t == 1], [False]])
    assert seen == [[0.5] * 3, [0.25] * 3, [0.125, 0.5, 0.125], [0.0625, 0.25, 0.0625]]


def test_ou_noise_needs_is_init():
    ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
    with pytest.raises(KeyError, match="no 'is_init' key.*add InitTracker"):
        ou(TensorDict(action=torch.zeros(3, 2), batch_size=[3]))


def test_annealing_steps_must_be_positive():
    with pytest.raises(
        ValueError, match="annealing_num_steps: expected a positive int, received 0"
    ):
        EGreedyModule(Categorical(2), annealing_num_steps=0)


def test_egreedy_takes_torchrl_device():
    # TorchRL's dqn_with_rnn passes device=; the state (eps) lives there
    from rl_envs import Categorical

    explore = EGreedyModule(Categorical(4), eps_init=0.2, annealing_num_steps=10, device="cpu")
    assert explore.eps.device == torch.device("cpu") and float(explore.eps) == pytest.approx(0.2)
    explore.step(10)
    assert float(explore.eps) == pytest.approx(0.1)


@pytest.mark.parametrize("spec", [Categorical(3), OneHot(3)], ids=["categorical", "one-hot"])
def test_epsilon_greedy_on_one_unbatched_action(spec):
    """A ``[]`` env's single action (TorchRL's dqn_with_rnn.py: ``GymEnv(name)``)."""
    explore = EGreedyModule(spec, eps_init=1.0, eps_end=1.0, annealing_num_steps=1)
    greedy = spec.zero()
    draws = torch.stack([explore(TensorDict(action=greedy.clone()))["action"]
                         for _ in range(200)])
    assert draws.shape == (200, *spec.shape)
    assert all(spec.is_in(d) for d in draws) and (draws != greedy).any()


def test_additive_gaussian_takes_torchrl_device_argument():
    # TorchRL's td3 sota script passes device=; the state (sigma) lives there
    spec = Bounded(-1.0, 1.0, shape=(2,))
    noise = AdditiveGaussianModule(spec, sigma_init=1.0, sigma_end=1.0, std=0.1, device="cpu")
    assert noise.sigma.device.type == "cpu"
    td = noise(TensorDict(action=torch.zeros(32, 2), batch_size=[32]))
    assert bool((td["action"] != 0).any()) and bool((td["action"].abs() <= 1).all())
