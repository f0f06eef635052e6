"""AsyncBatchedCollector with real envs (SleepyEnv, gymnasium CartPole), threads and processes."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path

import psutil
import pytest
import torch
from rl_collectors import AsyncBatchedCollector, CollectorError, WorkerError
from tensordict.nn import TensorDictModule

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
import async_batched_helpers as helpers  # noqa: E402
from collectors_helpers import children  # noqa: E402

sys.path.remove(HERE)


def our_threads() -> list[str]:
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("rl-async-env", "rl-inference-server"))
    ]


def check_frames(batch, episode_len: int) -> None:
    """Frames grouped by env; per env, consecutive steps; outputs match the policy."""
    env_ids = batch["collector", "env_ids"]
    assert torch.equal(env_ids, env_ids.sort(stable=True).values)
    obs, nobs = batch["observation"][:, 0], batch["next", "observation"][:, 0]
    done = batch["next", "done"][:, 0]
    assert torch.equal(batch["action"], obs.long() % 2)
    assert torch.equal(batch["score"][:, 0], 2 * obs)
    assert torch.equal(nobs, obs + 1)
    assert torch.equal(done, nobs == episode_len)
    same_env = env_ids[1:] == env_ids[:-1]
    # within an env: the next frame continues the step, or starts a new episode after done
    expected = torch.where(done[:-1], torch.zeros_like(obs[1:]), nobs[:-1])
    assert torch.equal(obs[1:][same_env], expected[same_env])


@pytest.mark.timeout(120)
def test_layout_traj_ids_contiguous_and_complete() -> None:
    make = partial(helpers.make_sleepy, 0.0005, 5)
    with AsyncBatchedCollector(make, helpers.parity_policy(), num_envs=4, frames_per_batch=40,
                               total_frames=200) as collector:
        trajs: dict[int, list] = defaultdict(list)
        owner: dict[int, int] = {}
        batches = 0
        for batch in collector:
            batches += 1
            assert batch.batch_size == torch.Size([40])
            check_frames(batch, 5)
            ids, envs = batch["collector", "traj_ids"], batch["collector", "env_ids"]
            for tid, env, o, d in zip(
                ids.tolist(),
                envs.tolist(),
                batch["observation"][:, 0].tolist(),
                batch["next", "done"][:, 0].tolist(),
                strict=True,
            ):
                assert owner.setdefault(tid, env) == env  # one id, one env
                trajs[tid].append((o, d))
        assert batches == 5 and collector.frames == 200
    for steps in trajs.values():  # each trajectory: 0, 1, 2, ... in order, done only at its end
        assert [o for o, _ in steps] == list(range(len(steps)))
        assert [d for _, d in steps] == [False] * (len(steps) - 1) + [len(steps) == 5]
    finished = [s for s in trajs.values() if s[-1][1]]
    assert len(finished) >= len(trajs) - 4  # at most one unfinished trajectory per env
    assert our_threads() == []


@pytest.mark.timeout(120)
def test_server_never_exceeds_max_batch_size() -> None:
    with helpers.sleepy_collector(
        0.001, 7, 6, frames_per_batch=60, total_frames=240, max_batch_size=2, server_timeout=0.005
    ) as collector:
        frames = sum(b.numel() for b in collector)
        stats = collector.server_stats()
        report = collector.timing_report()
    assert frames == 240
    assert stats["max_batch_size"] <= 2
    assert stats["forwards"] >= 120  # 240 requests in batches of at most 2
    assert "mean batch size" in report and "policy" in report


@pytest.mark.timeout(120)
def test_slow_env_does_not_slow_the_rest() -> None:
    fns = [partial(helpers.make_sleepy, 0.03, 1000)] + [
        partial(helpers.make_sleepy, 0.003, 1000)
    ] * 3
    with AsyncBatchedCollector(fns, helpers.parity_policy(), num_envs=4, frames_per_batch=100,
                               total_frames=400) as collector:
        counts: Counter = Counter()
        for batch in collector:
            counts.update(batch["collector", "env_ids"].tolist())
    assert sum(counts.values()) == 400
    # in lockstep every env would get 100 frames; here the 10x slower env gets far fewer
    # and the others are not held back (the margin allows for a loaded machine's latency)
    for fast in (1, 2, 3):
        assert counts[fast] >= 2.5 * counts[0], counts


@pytest.mark.timeout(120)
def test_a_batch_finished_ahead_is_not_handed_out_twice() -> None:
    """While batch k waits on the slow env's one frame, the fast envs fill and finish
    batch k + 1: serving k + 1 must still plan k + 2, so every frame is delivered once
    (a stale slot was re-delivered before: frames twice, others lost)."""
    fns = [partial(helpers.make_sleepy, 0.2, 1000)] + [partial(helpers.make_sleepy, 0.0, 1000)] * 2
    seen: set[tuple[int, float]] = set()
    with AsyncBatchedCollector(fns, helpers.parity_policy(), num_envs=3, frames_per_batch=4,
                               total_frames=48) as collector:
        for batch in collector:
            check_frames(batch, 1000)
            for env, obs in zip(batch["collector", "env_ids"].tolist(),
                                batch["observation"][:, 0].tolist(), strict=True):
                assert (env, obs) not in seen, f"env {env}'s frame at t={obs} delivered twice"
                seen.add((env, obs))
    assert len(seen) == 48
    for env in range(3):  # each env's steps delivered once each, from its first on
        steps = sorted(obs for e, obs in seen if e == env)
        assert steps == [float(t) for t in range(len(steps))], (env, steps)


@pytest.mark.timeout(120)
def test_crash_of_one_env_thread_is_reported_and_everything_stops() -> None:
    fns = [partial(helpers.make_sleepy, 0.0, 5), partial(helpers.make_sleepy, 0.0, 5, fail_at=7)]
    collector = AsyncBatchedCollector(
        fns, helpers.parity_policy(), num_envs=2, frames_per_batch=4, total_frames=-1
    )
    with pytest.raises(WorkerError) as info:
        for _ in collector:
            pass
    assert info.value.worker_index == 1
    assert "boom from SleepyEnv" in str(info.value)
    deadline = time.monotonic() + 10
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert our_threads() == []
    with pytest.raises(CollectorError):
        collector.update_policy_weights_()


@pytest.mark.timeout(120)
def test_completed_trajectories_and_random_policy() -> None:
    make = partial(helpers.make_sleepy, 0.0, 4)
    with AsyncBatchedCollector(make, None, num_envs=3, frames_per_batch=6, total_frames=60,
                               yield_completed_trajectories=True) as collector:
        trajs = list(collector)
    assert len(trajs) >= 10
    for traj in trajs:
        assert traj["observation"][:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert traj["next", "done"][:, 0].tolist() == [False, False, False, True]
        assert traj["collector", "traj_ids"].unique().numel() == 1


class Threshold(torch.nn.Module):
    def __init__(self, bias: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.fill_(bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return (self.linear(obs)[..., 0] > 0).long()


@pytest.mark.timeout(120)
def test_weight_update_reaches_the_server_and_tags_frames() -> None:
    policy = TensorDictModule(Threshold(-1.0), in_keys=["observation"], out_keys=["action"])
    make = partial(helpers.make_sleepy, 0.0005, 5)
    with AsyncBatchedCollector(
        make, policy, num_envs=2, frames_per_batch=10, total_frames=-1
    ) as collector:
        it = iter(collector)
        first = next(it)
        assert (first["action"] == 0).all() and (first["collector", "policy_version"] == 0).all()
        assert (
            collector.update_policy_weights_(
                TensorDictModule(Threshold(1.0), in_keys=["observation"], out_keys=["action"])
            )
            == 1
        )
        for _ in range(3):
            batch = next(it)
        new = batch["collector", "policy_version"] == 1
        assert new.any() and (batch["action"][new] == 1).all()
        assert collector.state_dict()["policy_version"] == 1


def test_bad_arguments_are_named() -> None:
    make = partial(helpers.make_sleepy, 0.0, 5)
    cases = [
        (dict(num_envs=0), "num_envs"),
        (dict(num_envs=2, max_batch_size=1, min_batch_size=2), "min_batch_size"),
        (dict(num_envs=2, backend="fork"), "backend"),
        (dict(num_envs=2, max_frames_per_traj=3), "max_frames_per_traj"),
        (dict(num_envs=2, server_timeout=-1), "server_timeout"),
    ]
    for kwargs, name in cases:
        with pytest.raises(ValueError, match=name):
            AsyncBatchedCollector(make, None, frames_per_batch=4, **kwargs)
    with pytest.raises(ValueError, match=r"list of num_envs=3 callables .* received a list of 2"):
        AsyncBatchedCollector([make, make], None, num_envs=3, frames_per_batch=4)
    with pytest.raises(TypeError, match="create_env_fn: expected a callable"):
        AsyncBatchedCollector([make, "CartPole-v1"], None, num_envs=2, frames_per_batch=4)
    from rl_envs import GymEnv

    with pytest.raises(ValueError, match="single env"):
        AsyncBatchedCollector(
            lambda: GymEnv("CartPole-v1", num_envs=2,
                           categorical_action_encoding=True), None, num_envs=2, frames_per_batch=4
        )
    float_action = TensorDictModule(
        lambda obs: obs[..., 0], in_keys=["observation"], out_keys=["action"]
    )
    with pytest.raises(CollectorError, match="expected the action"):
        AsyncBatchedCollector(make, float_action, num_envs=2, frames_per_batch=4)
    assert our_threads() == []


@pytest.mark.timeout(600)
def test_multiprocessing_backend_layout_and_killed_worker(monkeypatch) -> None:
    monkeypatch.syspath_prepend(HERE)  # spawned workers import async_batched_helpers by name
    before = children()
    collector = helpers.sleepy_collector(
        0.0005, 5, 2, frames_per_batch=20, total_frames=-1, backend="multiprocessing"
    )
    pids = [p.pid for p in collector._state["pool"].processes]
    it = iter(collector)
    for _ in range(2):
        check_frames(next(it), 5)
    psutil.Process(pids[1]).kill()
    with pytest.raises(WorkerError) as info:
        for _ in range(50):
            next(it)
    assert info.value.worker_index == 1 and "died" in str(info.value)
    deadline = time.monotonic() + 15
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children() - before == set()
    assert our_threads() == []


@pytest.mark.timeout(120)
def test_enable_profile_traces_the_server_thread(tmp_path) -> None:
    make = partial(helpers.make_sleepy, 0.0, 5)
    with AsyncBatchedCollector(make, helpers.parity_policy(), num_envs=2, frames_per_batch=8,
                               total_frames=32) as collector:
        collector.enable_profile(
            num_rollouts=3, warmup_rollouts=1, save_path=str(tmp_path / "server.json")
        )
        assert sum(b.numel() for b in collector) == 32
        written = collector.disable_profile()
    assert written is not None and Path(written).is_file()
    text = Path(written).read_text()
    assert "aten::index_select" in text  # the server thread's ops were recorded
