"""Faults a long run meets, injected for real: each recovers as documented or names the file.

Kill mid-save (a child process SIGKILLed), each file of a checkpoint truncated, a full disk
(``RLIMIT_FSIZE`` in a child process), a deleted checkpoint folder, and an env that starts
emitting NaN. Nothing stored before the fault is lost. See ``docs/checkpointing.md``.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_collectors import Checkpointer, CheckpointError, Collector, valid_checkpoint
from rl_envs import FiniteTensorDictCheck, GymWrapper, NonFiniteError, TransformedEnv
from rl_replay import LazyTensorStorage, ReplayBuffer
from tensordict import TensorDict

TIMEOUT = 120


def _components(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    net = torch.nn.Linear(3, 2)
    buffer = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=4)
    return {"policy": net, "optim": torch.optim.Adam(net.parameters()), "buffer": buffer}


def _rows(n: int, start: int) -> TensorDict:
    return TensorDict({"obs": torch.arange(start, start + n).float().unsqueeze(1)}, [n])


def _run(directory: Path, saves: int = 3) -> list[dict]:
    """``saves`` checkpoints of a run; returns what each held (weights and rows)."""
    parts, held = _components(), []
    ckpt = Checkpointer(directory, **parts)
    for k in range(saves):
        parts["buffer"].extend(_rows(10, 100 * k))
        with torch.no_grad():
            parts["policy"].weight.add_(1.0)
        ckpt.save(frames=100 * (k + 1))
        held.append({"weight": parts["policy"].weight.detach().clone(),
                     "rows": parts["buffer"][:]["obs"].clone()})
    ckpt.close()
    return held


def _restore(directory: Path, **kwargs) -> tuple[dict | None, dict]:
    parts = _components(seed=1)
    ckpt = Checkpointer(directory, **parts)
    try:
        return ckpt.restore(**kwargs), parts
    finally:
        ckpt.close()


def _files(snapshot: Path) -> list[str]:
    return sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())


def test_keep_2_holds_the_newest_and_one_to_fall_back_to(tmp_path):
    _run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LATEST", "ckpt-000001", "ckpt-000002"]
    assert valid_checkpoint(tmp_path) == (tmp_path / "ckpt-000002", [])


@pytest.mark.parametrize("name", [
    "manifest.json", "state.pt", "replay/buffer/LATEST", "replay/buffer/ckpt-000000/state.pt",
    "replay/buffer/ckpt-000000/manifest.json", "replay/buffer/ckpt-000000/data/0.bin",
])  # fmt: skip
def test_each_truncated_file_falls_back_to_the_previous_checkpoint(tmp_path, name):
    held = _run(tmp_path)
    newest = tmp_path / "ckpt-000002"
    assert name in _files(newest)  # every file of a checkpoint is in the list
    (newest / name).write_bytes((newest / name).read_bytes()[:5])  # cut short, in place
    with pytest.warns(RuntimeWarning, match=r"resuming from ckpt-000001; skipped ckpt-000002: "):
        extra, parts = _restore(tmp_path)
    assert extra["frames"] == 200
    assert torch.equal(parts["policy"].weight, held[1]["weight"])
    assert torch.equal(parts["buffer"][:]["obs"], held[1]["rows"])
    assert (tmp_path / "ckpt-000002.corrupt").is_dir()  # kept to inspect, never loaded again


def test_the_list_of_truncated_files_is_every_file(tmp_path):
    _run(tmp_path, saves=1)
    assert _files(tmp_path / "ckpt-000000") == sorted([
        "manifest.json", "state.pt", "replay/buffer/LATEST", "replay/buffer/ckpt-000000/state.pt",
        "replay/buffer/ckpt-000000/manifest.json", "replay/buffer/ckpt-000000/data/0.bin",
        "replay/buffer/ckpt-000000/data/ID",
    ])  # fmt: skip


def test_a_changed_chunk_is_found_by_checksum_on_request(tmp_path):
    held = _run(tmp_path)
    chunk = tmp_path / "ckpt-000002/replay/buffer/ckpt-000000/data/0.bin"
    raw = bytearray(chunk.read_bytes())
    raw[0] ^= 0xFF  # same size: only the checksum sees it
    chunk.write_bytes(bytes(raw))
    assert valid_checkpoint(tmp_path)[0] == tmp_path / "ckpt-000002"  # by size: intact
    where, skipped = valid_checkpoint(tmp_path, checksum=True)
    assert where == tmp_path / "ckpt-000001"
    assert "data/0.bin: checksum differs" in skipped[0][1]
    assert held[1]["rows"].numel() == 20


def test_a_deleted_checkpoint_folder_falls_back_with_a_warning(tmp_path):
    held = _run(tmp_path)
    shutil.rmtree(tmp_path / "ckpt-000002")
    with pytest.warns(RuntimeWarning, match="ckpt-000002: named by LATEST but the folder"):
        extra, parts = _restore(tmp_path)
    assert extra["frames"] == 200 and torch.equal(parts["policy"].weight, held[1]["weight"])


def test_latest_without_an_intact_checkpoint_refuses_to_start_from_scratch(tmp_path):
    _run(tmp_path)
    for folder in tmp_path.glob("ckpt-*"):
        shutil.rmtree(folder)
    with pytest.raises(CheckpointError, match=r"allow_fresh=True .*--allow-fresh-start"):
        _restore(tmp_path)
    assert (tmp_path / "LATEST").read_text() == "ckpt-000002"  # nothing overwritten
    with pytest.warns(RuntimeWarning, match="starting from scratch"):
        assert _restore(tmp_path, allow_fresh=True)[0] is None
    assert _restore(tmp_path / "empty")[0] is None  # nothing ever saved: a fresh run


_SAVER = """
import sys, torch
from rl_collectors import Checkpointer
from rl_replay import LazyTensorStorage, ReplayBuffer
from tensordict import TensorDict
net = torch.nn.Linear(1000, 1000)  # 4 MB of weights, 8 MB of Adam state
buffer = ReplayBuffer(storage=LazyTensorStorage(40000), batch_size=4)
ckpt = Checkpointer(sys.argv[1], policy=net, optim=torch.optim.Adam(net.parameters()),
                    buffer=buffer)
for k in range(1000):
    buffer.extend(TensorDict({"obs": torch.full((4000, 8), float(k))}, [4000]))
    with torch.no_grad():
        net.weight.fill_(k)
    ckpt.save(frames=k)
    print(k, flush=True)
"""


def _lines(child, n: int) -> list[str]:
    """The first ``n`` complete lines ``child`` printed, once it has printed them."""
    deadline = time.monotonic() + TIMEOUT
    while len(lines := child.stdout().split("\n")[:-1]) < n:
        assert child.poll() is None, child.stderr()[-3000:]
        assert time.monotonic() < deadline, f"{n} lines not printed in time"
        time.sleep(0.01)
    return lines[:n]


def test_a_process_killed_mid_save_leaves_a_checkpoint_that_loads(tmp_path, zygote):
    # `python -c _SAVER` forked from the zygote fixture (torch imported once per module)
    child = zygote.launch(code=_SAVER, argv=[str(tmp_path)], cwd=tmp_path)
    try:
        done = [int(line) for line in _lines(child, 3)]  # three saves complete
        time.sleep(0.05)  # a save is most of the loop: the kill lands inside one
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)
    finally:
        child.kill()
        child.wait(TIMEOUT)
    net = torch.nn.Linear(1000, 1000)
    buffer = ReplayBuffer(storage=LazyTensorStorage(40000), batch_size=4)
    ckpt = Checkpointer(tmp_path, policy=net, optim=torch.optim.Adam(net.parameters()),
                        buffer=buffer)
    extra = ckpt.restore()
    ckpt.close()
    frames = extra["frames"]
    assert frames >= done[-1]
    assert torch.all(net.weight == frames) and torch.all(buffer[:]["obs"][-4000:] == frames)


_FULL_DISK = """
import resource, sys, torch
from rl_collectors import Checkpointer, CheckpointError
from rl_replay import LazyTensorStorage, ReplayBuffer
from tensordict import TensorDict
net = torch.nn.Linear(4, 4)
buffer = ReplayBuffer(storage=LazyTensorStorage(200000), batch_size=4)
buffer.extend(TensorDict({"obs": torch.zeros(1000, 4)}, [1000]))
ckpt = Checkpointer(sys.argv[1], policy=net, buffer=buffer)
ckpt.save(frames=1)  # fits
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))  # no file over 100 kB
buffer.extend(TensorDict({"obs": torch.ones(100000, 4)}, [100000]))
try:
    ckpt.save(frames=2)
except CheckpointError as err:
    print(type(err).__module__, "|", err, "|", repr(err.__cause__), flush=True)
from rl_replay import LazyMemmapStorage, StorageError
mapped = ReplayBuffer(storage=LazyMemmapStorage(100000, scratch_dir=sys.argv[2]))
try:  # 1.6 MB allocated up front at the first extend: refused now, not a SIGBUS later
    mapped.extend(TensorDict({"obs": torch.ones(10, 4)}, [10]))
except StorageError as err:
    print(err, "|", len(mapped), flush=True)
"""


def test_a_full_disk_names_the_file_and_keeps_the_previous_checkpoint(tmp_path, zygote):
    scratch = tmp_path / "scratch"
    child = zygote.launch(code=_FULL_DISK, argv=[str(tmp_path / "run"), str(scratch)],
                          cwd=tmp_path)  # fmt: skip
    out, err = child.communicate(TIMEOUT)
    assert child.returncode == 0, err[-3000:]
    saved, mapped = out.strip().splitlines()
    message, rows = mapped.split(" | ")
    assert rows == "0" and "allocate 1600000 bytes to " in message and "File too large" in message
    assert not [p for p in scratch.rglob("*") if p.is_file()]  # nothing half-allocated left
    module, message, cause = saved.split(" | ")
    assert module == "rl_collectors.exceptions"  # the buffer's error, wrapped by the run's
    assert message.startswith("replay buffer 'buffer': write 524288 bytes to ")
    assert "data/0.bin failed: File too large" in message
    assert cause.startswith("CheckpointError(") and "File too large" in cause
    run = tmp_path / "run"
    assert not list(run.glob("*.tmp"))  # nothing half-written where a load would look
    assert (run / "LATEST").read_text() == "ckpt-000000"
    net = torch.nn.Linear(4, 4)
    buffer = ReplayBuffer(storage=LazyTensorStorage(200000), batch_size=4)
    ckpt = Checkpointer(run, policy=net, buffer=buffer)
    assert ckpt.restore()["frames"] == 1 and len(buffer) == 1000
    ckpt.close()



class _NaNAt(gym.Wrapper):
    """A real CartPole that emits NaN in ``what`` (``"obs"`` or ``"reward"``) at step ``at``."""

    def __init__(self, env: gym.Env, at: int, what: str) -> None:
        super().__init__(env)
        self.at, self.what, self.t = at, what, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.t += 1
        if self.t == self.at:
            if self.what == "obs":
                obs = obs.copy()
                obs[2] = np.nan
            else:
                reward = float("inf")
        return obs, reward, terminated, truncated, info


def _nan_env(what: str, at: int = 7, bad: int = 2) -> GymWrapper:
    def make(i: int):
        return lambda: _NaNAt(gym.make("CartPole-v1"), at if i == bad else 10**9, what)

    venv = gym.vector.SyncVectorEnv([make(i) for i in range(3)])
    env = GymWrapper(venv)
    env.set_seed(0)
    return env


# one step a batch: a slab's batch, checked through its numpy views (RolloutWriter.arrays)
@pytest.mark.parametrize(("frames", "step", "before"), [(12, 2, 1), (3, 0, 6)],
                         ids=["four-steps", "one-step"])
@pytest.mark.parametrize(("what", "key"), [("obs", "observation"), ("reward", "reward")])
def test_a_nan_emitting_env_is_stopped_by_the_collector_naming_key_env_and_step(
        what, key, frames, step, before):
    stored = []
    collector = Collector(_nan_env(what), frames_per_batch=frames, total_frames=60,
                          check_finite=True, post_collect_hook=stored.append)
    try:
        with pytest.raises(NonFiniteError, match=rf"'next', '{key}'\) is not finite at sub-env "
                           rf"2, step {step} of this batch \(frame 18 of the run\)"):
            for _ in collector:
                pass
        assert len(stored) == before  # the batches before it were delivered, not the NaN one
    finally:
        collector.shutdown()
    unchecked = Collector(_nan_env(what), frames_per_batch=12, total_frames=24)  # off: silent
    try:
        batches = [b.clone() for b in unchecked]
        assert not torch.isfinite(batches[1]["next", key]).all()
    finally:
        unchecked.shutdown()


def test_the_transform_names_key_env_and_step():
    env = TransformedEnv(_nan_env("obs", at=4, bad=1), FiniteTensorDictCheck())
    try:
        with pytest.raises(NonFiniteError, match=r"'next', 'observation'\) is not finite at "
                           r"sub-env 1 at step 4: \[.*nan"):
            env.rollout(10, break_when_any_done=False)
    finally:
        env.close()
