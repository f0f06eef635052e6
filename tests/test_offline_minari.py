"""Collector batches -> a Minari dataset -> ``MinariExperienceReplay`` (issue 43): the same
transitions, keys and episode boundaries come back; later loads map the copy; a missing,
partial or corrupt dataset is named and nothing is written over it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from rl_collectors import Collector
from rl_envs import GymEnv
from rl_replay import DatasetError, MinariExperienceReplay, write_minari_dataset
from tensordict import TensorDict

minari = pytest.importorskip("minari")  # the rl-replay[minari] extra (Python >= 3.11)

STEP_KEYS = ["observation", "action", ("next", "observation"), ("next", "reward"),
             ("next", "done"), ("next", "terminated"), ("next", "truncated")]


@pytest.fixture
def minari_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path


def _collect(frames: int, num_envs: int = 2, steps: int = 50) -> list[TensorDict]:
    """Real Pendulum batches from a random policy; copies, as the collector may reuse its
    buffer."""
    env = GymEnv("Pendulum-v1", num_envs=num_envs)
    env.set_seed(0)
    collector = Collector(env, None, frames_per_batch=num_envs * steps, total_frames=frames)
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


def _episodes_of(batches: list[TensorDict]) -> list[TensorDict]:
    """The reference: each env's steps in time order, cut after each done, in the order the
    writer emits them (by batch, then env, then time)."""
    time = batches[0].batch_size[-1]
    flat = [b.select(*STEP_KEYS).reshape(-1, time) for b in batches]
    pending: dict[int, list[TensorDict]] = {}
    out = []
    for batch in flat:
        for env in range(batch.shape[0]):
            row, start = batch[env], 0
            for end in torch.nonzero(row["next", "done"].reshape(-1)).flatten().tolist():
                out.append(torch.cat(pending.pop(env, []) + [row[start:end + 1]]))
                start = end + 1
            if start < time:
                pending.setdefault(env, []).append(row[start:])
    return out


def test_round_trip_gives_back_transitions_keys_and_episodes(minari_dir, tmp_path):
    batches = _collect(800)  # 2 envs x 400 steps: two 200-step episodes each
    path = write_minari_dataset("test/pendulum-random-v0", batches, env_id="Pendulum-v1")
    assert path == minari_dir / "test/pendulum-random-v0"
    dataset = minari.load_dataset("test/pendulum-random-v0")
    assert dataset.total_episodes == 4
    # the spaces default to the env's bounds, with the data's dtype
    assert dataset.action_space.low.tolist() == [-2.0]
    assert dataset.action_space.high.tolist() == [2.0]
    assert dataset.observation_space.high.tolist() == [1.0, 1.0, 8.0]
    rb = MinariExperienceReplay("test/pendulum-random-v0", 16, root=tmp_path / "copies",
                                load_from_local_minari=True)
    data = rb[:]
    assert set(map(str, data.keys(True, True))) == set(map(str, STEP_KEYS + ["episode"]))
    expected = _episodes_of(batches)
    assert len(expected) == 4 and len(data) == 800
    for episode_id, ref in enumerate(expected):
        got = data[data["episode"] == episode_id]
        for key in STEP_KEYS:
            torch.testing.assert_close(got[key], ref[key].reshape(got[key].shape), msg=str(key))
        assert got["next", "done"][-1].item() and not got["next", "done"][:-1].any()
    sample = rb.sample()
    assert sample.batch_size == torch.Size([16])
    assert sample["next", "reward"].shape == (16, 1)


def test_episodes_span_batches_and_unfinished_ones_are_truncated_or_dropped(minari_dir):
    batches = _collect(2 * 300, steps=60)  # one done at step 200; 100 steps left running
    write_minari_dataset("test/span-v0", batches)
    write_minari_dataset("test/span-drop-v0", batches, unfinished="drop")
    kept = minari.load_dataset("test/span-v0")
    assert kept.total_episodes == 4 and kept.total_steps == 600
    tails = [ep for ep in kept.iterate_episodes() if len(ep.rewards) == 100]
    assert len(tails) == 2 and all(ep.truncations[-1] for ep in tails)
    assert minari.load_dataset("test/span-drop-v0").total_steps == 400


def test_second_load_maps_the_copy_without_reading_minari(minari_dir, tmp_path):
    write_minari_dataset("test/map-v0", _collect(400))
    first = MinariExperienceReplay("test/map-v0", 8, root=tmp_path, load_from_local_minari=True)
    (minari_dir / "test/map-v0/data/main_data.hdf5").unlink()  # the source is gone
    second = MinariExperienceReplay("test/map-v0", 8, root=tmp_path)
    torch.testing.assert_close(second[:]["observation"], first[:]["observation"])
    assert type(second.storage.leaf("observation")).__name__ == "MemoryMappedTensor"


def test_no_local_dataset_says_it_must_be_local_and_how_to_make_one(minari_dir, tmp_path):
    with pytest.raises(DatasetError, match="must be local.*write_minari_dataset"):
        MinariExperienceReplay("mujoco/halfcheetah/medium-v0", 8, root=tmp_path, download=True)
    assert not (tmp_path / "mujoco").exists() or not any((tmp_path / "mujoco").rglob("*.memmap"))


def test_partial_minari_dataset_is_named_and_nothing_is_written(minari_dir, tmp_path):
    write_minari_dataset("test/partial-v0", _collect(400))
    hdf5 = minari_dir / "test/partial-v0/data/main_data.hdf5"
    os.truncate(hdf5, hdf5.stat().st_size // 2)
    with pytest.raises(DatasetError, match="main_data.hdf5"):
        MinariExperienceReplay("test/partial-v0", 8, root=tmp_path, load_from_local_minari=True)
    assert not list(tmp_path.rglob("*.memmap"))
    (minari_dir / "test/partial-v0/data/metadata.json").unlink()
    with pytest.raises(DatasetError, match="metadata.json: missing"):
        MinariExperienceReplay("test/partial-v0", 8, root=tmp_path, load_from_local_minari=True)


def test_corrupt_copy_is_named_and_not_written_over(minari_dir, tmp_path):
    write_minari_dataset("test/corrupt-v0", _collect(400))
    MinariExperienceReplay("test/corrupt-v0", 8, root=tmp_path, load_from_local_minari=True)
    leaf = next(tmp_path.rglob("observation.memmap"))
    os.truncate(leaf, 100)
    with pytest.raises(DatasetError, match="observation.memmap.*download='force'"):
        MinariExperienceReplay("test/corrupt-v0", 8, root=tmp_path, load_from_local_minari=True)
    assert leaf.stat().st_size == 100  # left as found
    rebuilt = MinariExperienceReplay("test/corrupt-v0", 8, root=tmp_path, download="force",
                                     load_from_local_minari=True)
    assert len(rebuilt) == 400


def test_writer_refuses_to_write_over_a_dataset(minari_dir):
    batches = _collect(400)
    write_minari_dataset("test/once-v0", batches)
    with pytest.raises(DatasetError, match="not written over"):
        write_minari_dataset("test/once-v0", batches)


def test_split_trajs_gives_padded_episodes_with_a_mask(minari_dir, tmp_path):
    write_minari_dataset("test/split-v0", _collect(2 * 300, steps=60))
    rb = MinariExperienceReplay("test/split-v0", 2, root=tmp_path, split_trajs=True,
                                load_from_local_minari=True)
    data = rb[:]
    assert data.batch_size == torch.Size([4, 200])
    assert data["mask"].sum(-1).tolist() == [200, 200, 100, 100]
    assert rb.sample().batch_size == torch.Size([2, 200])
