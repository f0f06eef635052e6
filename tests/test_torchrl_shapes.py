"""TorchRL's shapes on one unbatched simulator (batch ``[]``) and on vector envs (``[N]``).

One env over one gymnasium simulator has ``batch_size == []`` and its rollout ``[T]``, as
in TorchRL; a vector env has ``[N]`` and ``[N, T]``. Every layer downstream reads
``env.batch_size``: transforms, collectors, the replay buffer's ``len``, the estimators and
the losses. The ``[]`` case is checked against the same simulator seen as a ``[1]`` env
(same seed, same actions): the same numbers, one dim less.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from rl_collectors import Collector, MultiSyncCollector
from rl_envs import (
    CatFrames,
    CatTensors,
    ClipTransform,
    Compose,
    DoubleToFloat,
    DTypeCastTransform,
    ExcludeTransform,
    FiniteTensorDictCheck,
    FrameSkipTransform,
    GymEnv,
    InitTracker,
    NormalizeReward,
    ObservationNorm,
    PermuteTransform,
    RenameTransform,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SelectTransform,
    SignTransform,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    Unbounded,
    UnsqueezeTransform,
    VecNorm,
)
from rl_modules import MLP, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss, TDLambdaEstimator, VTrace
from rl_replay import LazyTensorStorage, ReplayBuffer
from tensordict.nn import TensorDictModule

SHAPES = [None, 3]  # GymEnv's num_envs: None -> batch [], 3 -> batch [3]
OBS = "observation"

TRANSFORMS = {
    "StepCounter": lambda: StepCounter(max_steps=3),
    "InitTracker": InitTracker,
    "RewardSum": RewardSum,
    "ObservationNorm": lambda: ObservationNorm(loc=0.5, scale=2.0, in_keys=[OBS]),
    "VecNorm": lambda: VecNorm(in_keys=[OBS]),
    "CatFrames": lambda: CatFrames(N=3, dim=-1, in_keys=[OBS]),
    "CatTensors": lambda: CatTensors([OBS], "vector", del_keys=False),
    "ClipTransform": lambda: ClipTransform([OBS], low=-0.5, high=0.5),
    "DTypeCastTransform": lambda: DTypeCastTransform(torch.float32, torch.float64, [OBS]),
    "DoubleToFloat": lambda: Compose(
        DTypeCastTransform(torch.float32, torch.float64, [OBS]), DoubleToFloat([OBS])
    ),
    "ExcludeTransform": lambda: Compose(CatTensors([OBS], "v", del_keys=False),
                                        ExcludeTransform("v")),
    "SelectTransform": lambda: SelectTransform(OBS),
    "RenameTransform": lambda: RenameTransform([OBS], ["obs"]),
    "UnsqueezeTransform": lambda: UnsqueezeTransform(-1, in_keys=[OBS]),
    "PermuteTransform": lambda: Compose(UnsqueezeTransform(-1, in_keys=[OBS]),
                                        PermuteTransform((-1, -2), in_keys=[OBS])),
    "SignTransform": lambda: SignTransform([OBS]),
    "RewardClipping": lambda: RewardClipping(-1.0, 0.5),
    "RewardScaling": lambda: RewardScaling(1.0, 0.5),
    "NormalizeReward": NormalizeReward,
    "FrameSkipTransform": lambda: FrameSkipTransform(2),
    "FiniteTensorDictCheck": FiniteTensorDictCheck,
    "TensorDictPrimer": lambda: TensorDictPrimer(hidden=Unbounded((2,))),
}


def pendulum(num_envs: int | None, transform=None) -> TransformedEnv | GymEnv:
    env = GymEnv("Pendulum-v1", num_envs, max_episode_steps=4)
    return env if transform is None else TransformedEnv(env, transform)


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_every_transform_steps_an_unbatched_env_as_its_one_env_twin(name):
    """Same seed, same actions: the ``[]`` env's rollout is the ``[1]`` env's, squeezed;
    episodes end inside it (``max_episode_steps=4``), so resets are covered too."""
    single, twin = pendulum(None, TRANSFORMS[name]()), pendulum(1, TRANSFORMS[name]())
    assert single.batch_size == () and twin.batch_size == (1,)
    single.set_seed(0), twin.set_seed(0)
    actions = twin.full_action_spec.rand((9,)).get("action")  # [T, 1, 1]
    steps = iter(range(9))

    def replay(td):
        t = next(steps)
        return td.set("action", actions[t] if td.batch_size else actions[t, 0])

    a = single.rollout(9, replay, break_when_any_done=False)
    steps = iter(range(9))
    b = twin.rollout(9, replay, break_when_any_done=False)
    assert a.batch_size == (9,) and b.batch_size == (1, 9)
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)[0]), key
    single.close(), twin.close()


def agent(n_obs: int, n_act: int) -> tuple[ProbabilisticActor, ValueOperator]:
    actor = ProbabilisticActor(
        TensorDictModule(MLP(n_obs, n_act, num_cells=16, depth=1), [OBS], ["logits"]),
        ["logits"], distribution_class=torch.distributions.Categorical, return_log_prob=True,
    )
    return actor, ValueOperator(MLP(n_obs, 1, num_cells=16, depth=1))


def cartpole(num_envs: int | None) -> TransformedEnv:
    return TransformedEnv(GymEnv("CartPole-v1", num_envs, categorical_action_encoding=True),
                          Compose(StepCounter(), RewardSum()))


@pytest.mark.parametrize("num_envs", SHAPES)
def test_collector_buffer_estimators_and_loss_follow_the_env_batch(num_envs):
    """A batch is ``[*env.batch_size, T]``; ``len(buffer)`` counts its first dim, as
    TorchRL (``[T]`` from one env: ``frames_per_batch``, as its getting-started asserts;
    ``[N, T]``: ``N`` rows, ``N * T`` with ``ndim=2``); GAE, TD(lambda), VTrace and the
    PPO loss run on either."""
    torch.manual_seed(0)
    actor, critic = agent(4, 2)
    env = cartpole(num_envs)
    env.set_seed(0)
    rows = (num_envs,) if num_envs else ()
    collector = Collector(env, actor, frames_per_batch=24, total_frames=48)
    batches = [b.clone() for b in collector]
    collector.shutdown()
    t = 24 // (num_envs or 1)
    assert [b.batch_size for b in batches] == [torch.Size([*rows, t])] * 2
    batch = batches[-1]
    assert batch["next", "reward"].shape == (*rows, t, 1)
    assert batch["step_count"].shape == (*rows, t, 1)
    ids = batch["collector", "traj_ids"]
    assert ids.shape == (*rows, t)
    buffer = ReplayBuffer(storage=LazyTensorStorage(100))
    buffer.extend(batch)
    assert len(buffer) == (num_envs or 24)
    if num_envs:
        flat = ReplayBuffer(storage=LazyTensorStorage(100, ndim=2))
        flat.extend(batch)
        assert len(flat) == 24
    for estimator in (
        GAE(gamma=0.9, lmbda=0.95, value_network=critic),
        TDLambdaEstimator(gamma=0.9, lmbda=0.95, value_network=critic),
        VTrace(gamma=0.9, actor_network=actor, value_network=critic),
    ):
        out = estimator(batch.clone())
        assert out["advantage"].shape == (*rows, t, 1), type(estimator).__name__
        assert out["value_target"].isfinite().all()
    data = GAE(gamma=0.9, lmbda=0.95, value_network=critic)(batch.clone())
    loss = ClipPPOLoss(actor, critic)(data.reshape(-1))
    sum(v for k, v in loss.items() if k.startswith("loss_")).backward()


@pytest.mark.parametrize("estimator", ["gae", "td_lambda", "vtrace"])
def test_estimators_give_a_T_batch_what_they_give_its_1_T_twin(estimator):
    torch.manual_seed(1)
    actor, critic = agent(4, 2)
    env = cartpole(1)
    env.set_seed(1)
    twin = env.rollout(30, actor, break_when_any_done=False)  # [1, 30], episodes end inside
    env.close()
    make = {
        "gae": lambda: GAE(gamma=0.9, lmbda=0.9, value_network=critic),
        "td_lambda": lambda: TDLambdaEstimator(gamma=0.9, lmbda=0.9, value_network=critic),
        "vtrace": lambda: VTrace(gamma=0.9, actor_network=actor, value_network=critic),
    }[estimator]
    with torch.no_grad():
        a, b = make()(twin[0].clone()), make()(twin.clone())
    for key in ("advantage", "value_target"):
        torch.testing.assert_close(a[key], b[key][0])


@pytest.mark.timeout(300)
def test_multi_sync_collector_stacks_unbatched_workers():
    """TorchRL stacks its workers' ``[T]`` batches: ``[num_workers, T]``."""
    with MultiSyncCollector(
        [partial(GymEnv, "CartPole-v1")] * 2, None, frames_per_batch=16, total_frames=32
    ) as collector:
        shapes = [b.batch_size for b in collector]
    assert shapes == [torch.Size([2, 8])] * 2
