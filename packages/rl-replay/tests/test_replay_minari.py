"""``write_minari_dataset`` and ``MinariExperienceReplay`` refuse bad input by name and leave
nothing behind (the round trip from a real collector is ``tests/test_offline_minari.py``)."""

from __future__ import annotations

import pytest
import torch
from rl_replay import DatasetError, MinariExperienceReplay, write_minari_dataset
from tensordict import TensorDict

pytest.importorskip("minari")  # the rl-replay[minari] extra (Python >= 3.11)


def _batch(envs: int = 2, steps: int = 5, *, done_at: int = 2) -> TensorDict:
    done = torch.zeros(envs, steps, 1, dtype=torch.bool)
    done[:, done_at] = True
    return TensorDict({
        "observation": torch.randn(envs, steps, 3), "action": torch.randn(envs, steps, 1),
        "next": {"observation": torch.randn(envs, steps, 3),
                 "reward": torch.randn(envs, steps, 1), "done": done, "terminated": done},
    }, [envs, steps])


def test_a_batch_without_a_key_is_named_and_nothing_is_left(tmp_path):
    bad = _batch().exclude(("next", "reward"))
    with pytest.raises(DatasetError, match="'next', 'reward'"):
        write_minari_dataset("t/bad-v0", [bad], root=tmp_path)
    assert not [p for p in tmp_path.rglob("*") if p.is_file() or p.name.endswith(".tmp")]


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"unfinished": "keep"}, ValueError, "unfinished"),
    ({"dataset_id": "../escape-v0"}, DatasetError, "dataset_id"),
    ({"batches": []}, DatasetError, "no batch"),
    ({"batches": [torch.zeros(3)]}, DatasetError, "TensorDicts"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, error, match):
    args = {"dataset_id": "t/x-v0", "batches": [_batch()], **kwargs}
    with pytest.raises(error, match=match):
        write_minari_dataset(args.pop("dataset_id"), args.pop("batches"), root=tmp_path, **args)
    assert not list(tmp_path.rglob("*.hdf5"))


def test_episode_cut_where_done_is_set_with_the_final_next_observation(tmp_path):
    import minari

    batch = _batch(envs=1, steps=5, done_at=2)
    path = write_minari_dataset("t/cut-v0", [batch], root=tmp_path)
    episodes = list(minari.MinariDataset(path / "data").iterate_episodes())
    assert [len(ep.rewards) for ep in episodes] == [3, 2]
    torch.testing.assert_close(torch.as_tensor(episodes[0].observations[3]),
                               batch["next", "observation"][0, 2])
    assert episodes[0].terminations[-1] and episodes[1].truncations[-1]  # cut at the end


def test_reader_refuses_bad_download_and_a_missing_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    with pytest.raises(ValueError, match="download"):
        MinariExperienceReplay("t/none-v0", 4, root=tmp_path, download="yes")
    with pytest.raises(DatasetError, match="download=False"):
        MinariExperienceReplay("t/none-v0", 4, root=tmp_path, download=False)
