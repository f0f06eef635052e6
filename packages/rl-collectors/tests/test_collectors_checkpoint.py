"""Run checkpoints: what each component restores, the manifest's checks, atomicity."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_collectors import (
    Checkpointer,
    CheckpointError,
    Collector,
    MultiSyncCollector,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from rl_envs import GymEnv, ObservationNorm, RewardSum, StepCounter, TransformedEnv, VecNorm

HERE = Path(__file__).resolve().parent


def _env(seed=0):
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), VecNorm(decay=0.99))
    env.append_transform(
        ObservationNorm(loc=torch.zeros(4), scale=torch.ones(4), in_keys=["observation"])
    )
    env.append_transform(StepCounter())
    env.append_transform(RewardSum())
    return env


def _collector(**kw):
    return Collector(_env(), frames_per_batch=8, total_frames=64, init_random_frames=24, **kw)


def test_collector_counters_transform_statistics_and_version_round_trip(tmp_path):
    c = _collector()
    c.set_seed(5)
    batches = iter(c)
    for _ in range(3):
        next(batches)
    c.env.transform[1].loc = torch.full((4,), 0.5)  # as init_stats would set it
    save_checkpoint(tmp_path, collector=c)
    d = _collector()
    load_checkpoint(tmp_path, collector=d)
    assert (d.frames, d.iterations, d._seed) == (24, 3, 5)
    assert d._traj.next_local == c._traj.next_local
    vec, saved = d.env.transform[0].state_dict(), c.env.transform[0].state_dict()
    assert all(torch.equal(vec[k], saved[k]) for k in saved) and saved["observation_count"] > 0
    assert torch.equal(d.env.transform[1].loc, torch.full((4,), 0.5))
    # random-frame progress: 24 of 24 random frames done, the rest is the budget left
    assert sum(b.numel() for b in d) == 64 - 24 and d.frames == 64
    d.shutdown(), c.shutdown()


def test_a_resumed_collector_restarts_its_episodes_and_is_reproducible(tmp_path):
    c = _collector()
    c.set_seed(3)
    next(iter(c))
    save_checkpoint(tmp_path, collector=c)
    runs = []
    for _ in range(2):
        d = _collector()
        load_checkpoint(tmp_path, collector=d)
        batch = next(iter(d))
        assert batch["step_count"][:, 0].eq(0).all()  # a reset: episodes start over
        assert batch["next", "episode_reward"][:, 0].eq(1).all()
        runs.append(batch)
        d.shutdown()
    assert torch.equal(runs[0]["observation"], runs[1]["observation"])
    c.shutdown()


def test_policy_version_continues_after_a_load(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    from collectors_helpers import greedy_policy

    module = greedy_policy()
    c = Collector(GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True), module,
                  frames_per_batch=4, total_frames=-1)
    c.update_policy_weights_(), c.update_policy_weights_()
    save_checkpoint(tmp_path, collector=c)
    d = Collector(GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True), module,
                  frames_per_batch=4, total_frames=-1)
    load_checkpoint(tmp_path, collector=d)
    assert d.update_policy_weights_() == 3
    c.shutdown(), d.shutdown()


@pytest.mark.timeout(180)
def test_multi_collector_round_trip_and_worker_count_check(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    from collectors_helpers import make_cartpole

    kw = dict(frames_per_batch=8, total_frames=48)
    m = MultiSyncCollector([make_cartpole, make_cartpole], **kw)
    try:
        it = iter(m)
        next(it), next(it)
        save_checkpoint(tmp_path / "two", collector=m)
    finally:
        m.shutdown()
    m2 = MultiSyncCollector([make_cartpole, make_cartpole], **kw)
    try:
        load_checkpoint(tmp_path / "two", collector=m2)
        assert sum(b.numel() for b in m2) == 48 - 16
    finally:
        m2.shutdown()
    one = MultiSyncCollector([make_cartpole], frames_per_batch=4, total_frames=48)
    try:
        with pytest.raises(ValueError, match="expected the state of 1 workers, got 2"):
            load_checkpoint(tmp_path / "two", collector=one)
    finally:
        one.shutdown()


def test_rng_states_and_extra_round_trip(tmp_path):
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    save_checkpoint(tmp_path, extra={"step": 12})
    want = (torch.rand(3), np.random.rand(3), random.random())
    torch.manual_seed(2), np.random.seed(2), random.seed(2)
    assert load_checkpoint(tmp_path) == {"step": 12}
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and got[2] == want[2]


def test_target_updater_counter_round_trips(tmp_path):
    from rl_objectives import DQNLoss, HardUpdate
    from tensordict.nn import TensorDictModule

    loss = DQNLoss(TensorDictModule(torch.nn.Linear(2, 2), ["observation"], ["action_value"]))
    up = HardUpdate(loss, value_network_update_interval=3)
    up.step(), up.step()
    save_checkpoint(tmp_path, loss=loss, target_updater=up)
    other = HardUpdate(loss, value_network_update_interval=3)
    load_checkpoint(tmp_path, loss=loss, target_updater=other)
    assert other.counter == 2


def test_a_checkpoint_of_another_layout_or_version_is_refused_naming_the_part(tmp_path):
    net, opt = torch.nn.Linear(2, 2), None
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    save_checkpoint(tmp_path, policy=net, optim=opt)
    with pytest.raises(CheckpointError, match=r"missing: \['optim'\]"):
        load_checkpoint(tmp_path, policy=net)
    with pytest.raises(CheckpointError, match=r"component 'optim' was a torch.optim.sgd.SGD"):
        load_checkpoint(tmp_path, policy=net, optim=torch.optim.Adam(net.parameters()))
    manifest = latest_checkpoint(tmp_path) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["versions"]["rl-replay"] = "0.0.1"
    manifest.write_text(json.dumps(data))
    before = net.weight.detach().clone()
    with torch.no_grad():
        net.weight.add_(1.0)
    with pytest.raises(CheckpointError, match=r"written by rl-replay 0.0.1, this is rl-replay"):
        load_checkpoint(tmp_path, policy=net, optim=opt)
    assert not torch.equal(net.weight, before)  # nothing was loaded
    load_checkpoint(tmp_path, policy=net, optim=opt, strict=False)
    assert torch.equal(net.weight, before)
    data["format"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="format 99, expected 1"):
        load_checkpoint(tmp_path, policy=net, optim=opt, strict=False)
    with pytest.raises(CheckpointError, match="expected a checkpoint directory"):
        load_checkpoint(tmp_path / "nowhere", policy=net)
    with pytest.raises(TypeError, match="components: expected objects with state_dict"):
        save_checkpoint(tmp_path, policy=object())


_WRITER = textwrap.dedent(
    """
    import os, sys, torch
    from rl_collectors import save_checkpoint
    from rl_replay import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer
    from tensordict import TensorDict

    def write(ckpt_dir, scratch):
        # the storage's files in a folder of the test's (a killed process removes nothing)
        storage = LazyMemmapStorage(400_000, scratch_dir=scratch)
        rb = TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=storage, batch_size=4)
        net = torch.nn.Linear(64, 64)
        step = 0
        while True:  # killed from outside, at any point of a save
            index = rb.extend(TensorDict({"obs": torch.full((50_000, 16), float(step))}, [50_000]))
            rb.update_priority(index, torch.full((50_000,), step + 1.0))
            save_checkpoint(ckpt_dir, policy=net, buffer=rb, extra={"step": step})
            print(os.getpid(), step, flush=True)
            step += 1

    # one import of torch for every case: each line on stdin forks a fresh writer process
    # (nothing computed here before the fork), which the test SIGKILLs; then it is reaped
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                write(*line.split())
            finally:
                os._exit(1)  # never back into this loop
        os.waitpid(pid, 0)
        print("reaped", pid, flush=True)
    """
)


@pytest.fixture(scope="module")
def writers():
    """A process that forks one checkpoint writer per request (the imports paid once)."""
    server = subprocess.Popen([sys.executable, "-c", _WRITER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        yield server
    finally:
        server.stdin.close()  # its loop ends
        try:
            server.wait(30)
        finally:
            server.kill()
            server.wait(30)
            server.stdout.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.31, 1.0])  # 1.0: the buffer has wrapped
def test_sigkill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path, delay, writers):
    ckpt_dir, scratch = tmp_path / "checkpoints", tmp_path / "scratch"
    writers.stdin.write(f"{ckpt_dir} {scratch}\n")
    writers.stdin.flush()
    pid, first = writers.stdout.readline().split()  # "reaped <pid>" if it failed
    try:
        assert first == "0"  # one checkpoint is complete
        if delay:
            import time

            time.sleep(delay)
    finally:
        if pid != "reaped":
            os.kill(int(pid), signal.SIGKILL)
    while not (line := writers.stdout.readline()).startswith("reaped"):
        assert line, "the writers' process ended"  # steps printed before the kill landed
    assert line.split() == ["reaped", pid]
    from rl_replay import LazyMemmapStorage, LazyTensorStorage, TensorDictPrioritizedReplayBuffer
    from tensordict import TensorDict

    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyMemmapStorage(400_000), batch_size=4
    )
    step = load_checkpoint(ckpt_dir, policy=torch.nn.Linear(64, 64), buffer=rb)["step"]
    # 8 slots of 50,000 rows written round robin: a fast machine wraps the buffer before
    # the kill, and slot j then holds the last step k <= step with k = j (mod 8)
    slots = min(step + 1, 8)
    assert len(rb) == 50_000 * slots
    expected = [max(k for k in range(step + 1) if k % 8 == j) for j in range(slots)]
    obs = rb[:]["obs"][:, 0]
    assert torch.equal(obs, torch.tensor(expected).repeat_interleave(50_000).float())
    # and the priorities the saved step had: each row's its step's + 1, set the same way
    ref = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(400_000), batch_size=4
    )
    index = ref.extend(TensorDict({"obs": torch.zeros(len(rb), 1)}, [len(rb)]))
    ref.update_priority(index, torch.tensor(expected).repeat_interleave(50_000) + 1.0)
    rows = slice(0, len(rb))
    assert torch.equal(rb.sampler.tree.leaves[rows], ref.sampler.tree.leaves[rows])
    assert torch.equal(rb.sampler.tree.min_leaves[rows], ref.sampler.tree.min_leaves[rows])
    rb.storage.cleanup()


def test_checkpointer_saves_on_sigterm_and_asks_the_loop_to_stop(tmp_path):
    net = torch.nn.Linear(2, 2)
    ckpt = Checkpointer(tmp_path, every_frames=1000, policy=net)
    try:
        assert ckpt.step(10, {"i": 0}) is False and latest_checkpoint(tmp_path) is None
        os.kill(os.getpid(), signal.SIGTERM)  # the handler only sets a flag
        assert ckpt.step(20, {"i": 1}) is True
        assert ckpt.restore() == {"i": 1, "frames": 20}
    finally:
        ckpt.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
