"""Collector (single process) on real gymnasium CartPole envs."""

from __future__ import annotations

import pytest
import rl_collectors
import torch
from rl_collectors import Collector, CollectorError, TrajCounter, split_trajectories
from rl_envs import GymEnv
from tensordict import TensorDict
from tensordict.nn import TensorDictModule


def make_env(n: int = 4) -> GymEnv:
    return GymEnv("CartPole-v1", num_envs=n, categorical_action_encoding=True)


def greedy(bias: tuple[float, float] = (0.0, 0.0)) -> TensorDictModule:
    net = torch.nn.Linear(4, 2)
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(torch.tensor(bias))
    return TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])


class ArgMax(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


def greedy_policy(bias: tuple[float, float] = (0.0, 0.0)):
    from tensordict.nn import TensorDictSequential

    return TensorDictSequential(
        greedy(bias), TensorDictModule(ArgMax(), in_keys=["logits"], out_keys=["action"])
    )


def test_exports_import() -> None:
    for name in rl_collectors.__all__:
        assert getattr(rl_collectors, name) is not None
    assert rl_collectors.__all__ == sorted(rl_collectors.__all__)


def test_layout_and_exact_total_frames() -> None:
    collector = Collector(make_env(4), frames_per_batch=40, total_frames=100)
    batches = list(collector)
    assert [b.batch_size for b in batches] == [torch.Size([4, 10])] * 2 + [torch.Size([4, 5])]
    assert sum(b.numel() for b in batches) == 100 == collector.frames
    b = batches[0]
    assert b["observation"].shape == (4, 10, 4) and b["next", "reward"].shape == (4, 10, 1)
    assert b["action"].dtype == torch.int64 and b["collector", "traj_ids"].dtype == torch.int64
    # the next observation of step t is the observation of step t+1 unless done
    same = (b["next", "observation"][:, :-1] == b["observation"][:, 1:]).all(-1)
    assert bool(same[~b["next", "done"][:, :-1, 0]].all())
    assert batches[0]["observation"].data_ptr() != batches[1]["observation"].data_ptr()
    collector.shutdown()
    collector.shutdown()  # idempotent


@pytest.mark.parametrize("envs", [1, 3])
def test_one_frame_batches_are_each_the_callers(envs) -> None:
    # after the first batch, each new one is laid out from the last (RolloutWriter.renew):
    # every batch handed out keeps what it held, with trajectory ids and policy versions
    # as one long batch's (a slab's batch writes them through its numpy views)
    runs = []
    for steps in (1, 60):
        env = make_env(envs)
        env.set_seed(0)
        with Collector(env, greedy_policy((0.0, 1.0)), frames_per_batch=steps * envs,
                       total_frames=60 * envs, check_finite=True) as collector:
            runs.append(list(collector))
    batches, (one,) = runs
    joined = torch.cat(batches, dim=-1)
    assert int(one["next", "done"].sum()) > envs  # trajectories end inside the batch
    for key in [("observation",), ("next", "observation"), ("next", "done"),
                ("collector", "policy_version")]:
        assert torch.equal(joined.get(key), one.get(key)), key
    # the same trajectories; numbered in the order they start (one long batch: row by row)
    pairs = set(zip(joined["collector", "traj_ids"].flatten().tolist(),
                    one["collector", "traj_ids"].flatten().tolist(), strict=True))
    assert len(pairs) == len({a for a, _ in pairs}) == len({b for _, b in pairs})
    if envs == 1:
        assert torch.equal(joined["collector", "traj_ids"], one["collector", "traj_ids"])
    assert len({b["observation"].data_ptr() for b in batches}) == 60


def test_one_frame_batches_shared_on_the_way_keep_the_next_ones_right() -> None:
    # one-frame batches come from a slab (RolloutWriter.renew); moving one of them to
    # shared memory (what a torch.multiprocessing queue does) moves the slab, and the
    # next batch, bound to it already, must be written where its memory now is
    runs = []
    for share in (False, True):
        env = make_env(1)
        env.set_seed(0)
        with Collector(env, greedy_policy((0.0, 1.0)), frames_per_batch=1,
                       total_frames=60, check_finite=True) as collector:
            batches = []
            for i, batch in enumerate(collector):
                if share and i % 7 == 3:
                    batch.share_memory_()
                batches.append(batch)
            runs.append(torch.cat(batches, dim=-1))
    plain, shared = runs
    for key in [("observation",), ("next", "observation"), ("next", "reward"),
                ("collector", "traj_ids")]:
        assert torch.equal(plain.get(key), shared.get(key)), key


def test_traj_ids_follow_done_and_are_unique() -> None:
    with Collector(make_env(4), frames_per_batch=200, total_frames=600) as collector:
        seen: dict[int, int] = {}
        for batch in collector:
            ids, done = batch["collector", "traj_ids"], batch["next", "done"][..., 0]
            for row in range(4):
                for t in range(1, ids.shape[1]):
                    assert (ids[row, t] != ids[row, t - 1]) == bool(done[row, t - 1])
                for i in ids[row].unique().tolist():
                    assert seen.setdefault(i, row) == row  # one id never spans two sub-envs


def test_traj_counter_numpy_and_torch_paths_agree() -> None:
    # CPU batches take the numpy path; another device's take torch's: same ids, same state
    gen = torch.Generator().manual_seed(0)
    cpu, other = TrajCounter(3, stride=2, offset=1), TrajCounter(3, stride=2, offset=1)
    for i, new_start in enumerate((True, False, False, True, False)):
        done = torch.rand(3, 5, generator=gen) < 0.3
        if i % 2:  # the collector's way on the CPU: written into the batch's leaf, [3, 5, 1]
            leaf = torch.full((3, 5, 1), -1, dtype=torch.int64)
            assert cpu.assign(done, new_start=new_start, out=leaf.numpy()) is None
            ids = leaf[..., 0]
        else:
            ids = cpu.assign(done, new_start=new_start)
        ref = other._assign_torch(done, new_start) * 2 + 1
        assert torch.equal(ids, ref)
        assert cpu.next_local == other.next_local
        assert torch.equal(cpu.current, other.current)
        assert torch.equal(cpu.pending, other.pending)


def test_traj_counter_one_step_path_agrees_with_torchs() -> None:
    # one-step batches (an off-policy loop's) take their own numpy path: same ids and state
    gen = torch.Generator().manual_seed(1)
    for rows, stride in ((1, 1), (4, 3)):
        cpu, other = TrajCounter(rows, stride=stride), TrajCounter(rows, stride=stride)
        for i in range(200):
            done, new_start = torch.rand(rows, 1, generator=gen) < 0.3, i % 37 == 5
            ref = other._assign_torch(done, new_start) * stride
            assert torch.equal(cpu.assign(done, new_start=new_start), ref)
            assert cpu.next_local == other.next_local
            assert torch.equal(cpu.current, other.current)
            assert torch.equal(cpu.pending, other.pending)
        cpu.load_state_dict(TrajCounter(rows, stride=stride).state_dict())  # tensors replaced
        assert torch.equal(cpu.assign(torch.zeros(rows, 1, dtype=torch.bool)),
                           torch.arange(rows)[:, None] * stride)


def test_split_trajectories_mask() -> None:
    collector = Collector(make_env(2), frames_per_batch=200, total_frames=200, split_trajs=True)
    out = next(iter(collector))
    mask = out["collector", "mask"]
    assert mask.shape == out.batch_size and int(mask.sum()) == 200
    lengths = mask.sum(-1)
    assert bool((mask == (torch.arange(mask.shape[1]) < lengths[:, None])).all())
    ids = out["collector", "traj_ids"]
    assert bool((ids[mask] == ids[:, :1].expand_as(ids)[mask]).all())
    assert bool((out["observation"][~mask] == 0).all())


def test_split_trajectories_without_ids() -> None:
    td = TensorDict(
        {
            "x": torch.arange(6.0).reshape(2, 3),
            "next": {"done": torch.tensor([[0, 1, 0], [0, 0, 0]]).bool()},
        },
        [2, 3],
    )
    out = split_trajectories(td)
    assert out["collector", "mask"].sum(-1).tolist() == [2, 1, 3]


def test_max_frames_per_traj_truncates() -> None:
    collector = Collector(make_env(2), frames_per_batch=60, total_frames=60, max_frames_per_traj=7)
    batch = next(iter(collector))
    lengths = split_trajectories(batch)["collector", "mask"].sum(-1)
    assert int(lengths.max()) <= 7
    assert bool(batch["next", "truncated"].any())


def test_init_random_frames_then_policy() -> None:
    collector = Collector(
        make_env(2),
        greedy_policy((5.0, 0.0)),
        frames_per_batch=20,
        total_frames=60,
        init_random_frames=20,
    )
    batches = list(collector)
    assert bool((batches[0]["action"] == 1).any())  # random: both actions (p = 1 - 2^-19)
    assert bool((batches[1]["action"] == 0).all()) and bool((batches[2]["action"] == 0).all())


def test_policy_outputs_and_weight_update() -> None:
    policy = greedy_policy((0.0, 5.0))
    collector = Collector(
        make_env(2), policy, frames_per_batch=10, exploration_type="deterministic"
    )
    batch = collector.rollout()
    assert bool((batch["action"] == 1).all()) and batch["logits"].shape == (2, 5, 2)
    trainer = greedy_policy((5.0, 0.0))
    assert collector.update_policy_weights_(trainer) == 1
    batch = collector.rollout()
    assert bool((batch["action"] == 0).all())
    assert bool((batch["collector", "policy_version"] == 1).all())


def test_policy_none_is_random_and_plain_module_is_wrapped() -> None:
    assert bool(Collector(make_env(2), frames_per_batch=8).rollout()["action"].le(1).all())
    with pytest.raises(Exception, match="action"):
        Collector(make_env(2), torch.nn.Linear(4, 2), frames_per_batch=8).rollout()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="frames_per_batch"):
        Collector(make_env(4), frames_per_batch=10)
    with pytest.raises(ValueError, match="total_frames"):
        Collector(make_env(4), frames_per_batch=8, total_frames=-5)
    with pytest.raises(ValueError, match="total_frames"):
        Collector(make_env(4), frames_per_batch=8, total_frames=10)
    with pytest.raises(CollectorError, match="action"):
        Collector(make_env(2), greedy(), frames_per_batch=8)
    with pytest.raises(ValueError, match="exploration_type"):
        Collector(make_env(2), frames_per_batch=8, exploration_type="bogus")


def test_state_dict_round_trip() -> None:
    policy = greedy_policy((1.0, 0.0))
    a = Collector(make_env(2), policy, frames_per_batch=20, total_frames=100)
    it = iter(a)
    next(it), next(it)
    state = a.state_dict()
    b = Collector(make_env(2), greedy_policy((0.0, 1.0)), frames_per_batch=20, total_frames=100)
    b.load_state_dict(state)
    assert b.frames == 40 and b.iterations == 2
    assert sum(x.numel() for x in b) == 60  # only what was left
    assert bool((b.rollout()["action"] == 0).all())  # weights restored


def test_replay_buffer_postproc_hook_and_timing() -> None:
    class ListBuffer:
        def __init__(self) -> None:
            self.items: list = []

        def extend(self, td) -> None:
            self.items.append(td.clone())

    rb, seen = ListBuffer(), []
    collector = Collector(
        make_env(2),
        frames_per_batch=8,
        total_frames=24,
        replay_buffer=rb,
        post_collect_hook=seen.append,
    )
    assert list(collector) == [None] * 3
    assert [t.batch_size for t in rb.items] == [torch.Size([2, 4])] * 3 and len(seen) == 3
    report = collector.timing_report()
    for key in ("rollout", "policy", "env_step", "storage"):
        assert key in report
    assert collector.timing.count("rollout") == 3
    doubled = Collector(
        make_env(2),
        frames_per_batch=8,
        total_frames=8,
        postproc=lambda td: td.set("x", td["next", "reward"] * 2),
    )
    assert bool((next(iter(doubled))["x"] == 2).all())


def test_set_seed_reproduces_and_reset_at_each_iter() -> None:
    def first_batches(seed: int):
        collector = Collector(
            make_env(2), frames_per_batch=20, total_frames=40, reset_at_each_iter=True
        )
        collector.set_seed(seed)
        return list(collector)

    a, b = first_batches(3), first_batches(3)
    for x, y in zip(a, b, strict=True):
        assert bool((x["observation"] == y["observation"]).all()) and bool(
            (x["action"] == y["action"]).all()
        )
    # every batch starts new trajectories
    assert int(a[1]["collector", "traj_ids"][:, 0].min()) > int(a[0]["collector", "traj_ids"].max())


def _cartpole_next(obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """CartPole-v1's Euler step (gymnasium's constants) from ``obs`` under ``action``."""
    x, x_dot, theta, theta_dot = obs.double().unbind(-1)
    force = torch.where(action == 1, 10.0, -10.0)
    total_mass, pole_ml, length = 1.1, 0.05, 0.5
    cos, sin = torch.cos(theta), torch.sin(theta)
    temp = (force + pole_ml * theta_dot**2 * sin) / total_mass
    theta_acc = (9.8 * sin - cos * temp) / (length * (4.0 / 3.0 - 0.1 * cos**2 / total_mass))
    x_acc = temp - pole_ml * theta_acc * cos / total_mass
    tau = 0.02
    return torch.stack(
        [
            x + tau * x_dot,
            x_dot + tau * x_acc,
            theta + tau * theta_dot,
            theta_dot + tau * theta_acc,
        ],
        -1,
    )


def test_random_policy_stores_the_actions_it_steps_and_is_reproducible() -> None:
    """``policy=None`` draws a batch of actions at once (RandomActor): the stored action of
    every step is the one the env stepped with (CartPole's physics from the stored
    observation reproduce the stored next observation), and a seeded run repeats."""

    def collect() -> TensorDict:
        torch.manual_seed(0)
        env = make_env(3)
        env.set_seed(0)
        collector = Collector(env, frames_per_batch=3 * 40, total_frames=3 * 80)
        batches = [b.clone() for b in collector]
        collector.shutdown()
        return torch.cat(batches, -1)

    data = collect()
    action = data["action"]
    assert set(action.unique().tolist()) == {0, 1}
    expected = _cartpole_next(data["observation"], action).float()
    torch.testing.assert_close(data["next", "observation"], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(collect(), data)


class PoleSide(torch.nn.Module):
    """Push towards the side the pole leans to: the action is a function of the observation."""

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return (observation[..., 2] > 0).long()


@pytest.mark.parametrize("policy_device", [None, "cpu:0"])
def test_stored_actions_are_the_policys_on_the_stored_observations(policy_device) -> None:
    """Each step's stored action is the policy's output on that step's stored observation,
    on the plain actor and on the device actor (``cpu:0`` differs from the env's ``cpu``:
    the inputs go through the device actor's buffers and the outputs come back)."""
    policy = TensorDictModule(PoleSide(), in_keys=["observation"], out_keys=["action"])
    collector = Collector(
        make_env(3), policy, frames_per_batch=3 * 30, total_frames=3 * 90,
        policy_device=policy_device,
    )
    try:
        batches = [b.clone() for b in collector]
        actor = type(collector._policy_actor).__name__
    finally:
        collector.shutdown()
    assert actor == ("PolicyActor" if policy_device is None else "DevicePolicyActor")
    data = torch.cat(batches, -1)
    assert set(data["action"].unique().tolist()) == {0, 1}
    assert torch.equal(data["action"], PoleSide()(data["observation"]))
    expected = _cartpole_next(data["observation"], data["action"]).float()
    torch.testing.assert_close(data["next", "observation"], expected, atol=1e-5, rtol=1e-5)
