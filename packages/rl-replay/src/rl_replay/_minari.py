"""``MinariExperienceReplay``: a local Minari dataset as a memory-mapped replay buffer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rl_profiling.atomic import AtomicDirectory
from tensordict import TensorDict, TensorDictBase

from rl_replay._layout import Layout
from rl_replay._minari_io import MAKE_ONE, import_minari, minari_dataset_dir
from rl_replay._samplers import RandomSampler, Sampler
from rl_replay._storage import LazyTensorStorage
from rl_replay._td_buffers import TensorDictReplayBuffer
from rl_replay._writers import ImmutableDatasetWriter
from rl_replay.exceptions import DatasetError

__all__ = ["MinariExperienceReplay"]

_FORMAT = "rl_replay.minari/1"
_DATA = "data"


def _default_root() -> Path:
    return Path.home() / ".cache" / "rl_replay" / "minari"


class _MappedStorage(LazyTensorStorage):
    """A full, read-only storage over tensors that already exist (memory-mapped files):
    nothing is copied; rows are read from the page cache when sampled."""

    def __init__(self, data: TensorDictBase) -> None:
        super().__init__(data.batch_size[0])
        layout = Layout.of(data, 1)
        self._attach(layout, [data.get(key) for key in layout.keys])
        self._set_filled(data.batch_size[0])


def _read_episodes(source: Path) -> TensorDict:
    """Every episode of the Minari dataset in ``source`` as one flat ``[N]`` TensorDict."""
    minari = import_minari()
    data = source / _DATA
    for name in ("metadata.json", "main_data.hdf5"):
        if not (data / name).is_file():
            raise DatasetError(f"{data / name}: missing; the Minari dataset at {source} is "
                               f"incomplete, nothing was loaded or written ({MAKE_ONE})")
    try:
        dataset = minari.MinariDataset(data)
        parts = [_episode_rows(ep) for ep in dataset.iterate_episodes()]
    except (OSError, KeyError, ValueError, json.JSONDecodeError) as err:
        raise DatasetError(f"{data / 'main_data.hdf5'}: unreadable or corrupt ({err}); "
                           "nothing was written") from err
    total = dataset.total_steps
    got = sum(len(p["episode"]) for p in parts)
    if got != total:
        raise DatasetError(f"{data / 'main_data.hdf5'}: holds {got} steps, metadata.json says "
                           f"{total}: the dataset is partial; nothing was written")
    cat = {k: torch.from_numpy(np.concatenate([p[k] for p in parts])) for k in parts[0]}
    n = len(cat["episode"])
    return TensorDict({
        "observation": cat["observation"], "action": cat["action"], "episode": cat["episode"],
        "next": {"observation": cat["next_observation"], "reward": cat["reward"].view(n, 1),
                 "terminated": cat["terminated"].view(n, 1),
                 "truncated": cat["truncated"].view(n, 1),
                 "done": (cat["terminated"] | cat["truncated"]).view(n, 1)},
    }, batch_size=[n])


def _episode_rows(episode: Any) -> dict[str, np.ndarray]:
    obs = np.asarray(episode.observations)
    steps = len(episode.rewards)
    if len(obs) != steps + 1:
        raise ValueError(f"episode {episode.id}: {len(obs)} observations for {steps} steps")
    return {
        "observation": obs[:-1], "next_observation": obs[1:],
        "action": np.asarray(episode.actions),
        "reward": np.asarray(episode.rewards, dtype=np.float32),
        "terminated": np.asarray(episode.terminations, dtype=bool),
        "truncated": np.asarray(episode.truncations, dtype=bool),
        "episode": np.full(steps, episode.id, dtype=np.int64),
    }


def _split(data: TensorDict) -> TensorDict:
    """``[N]`` steps -> ``[episodes, max_len]`` padded, with a boolean ``mask``."""
    episode = data["episode"]
    ids, counts = torch.unique_consecutive(episode, return_counts=True)
    length = int(counts.max())
    starts = torch.cumsum(counts, 0) - counts
    pos = torch.arange(len(episode)) - torch.repeat_interleave(starts, counts)
    row = torch.repeat_interleave(torch.arange(len(ids)), counts)
    out = TensorDict({}, [len(ids), length])
    for key, value in data.items(True, True):
        full = torch.zeros(len(ids), length, *value.shape[1:], dtype=value.dtype)
        full[row, pos] = value
        out.set(key, full)
    mask = torch.zeros(len(ids), length, dtype=torch.bool)
    mask[row, pos] = True
    out.set("mask", mask)
    return out


class MinariExperienceReplay(TensorDictReplayBuffer):
    """A local Minari dataset as a replay buffer over a memory-mapped copy (TorchRL's name).

    The first load reads the Minari dataset (HDF5) once and writes its transitions as
    memory-mapped files under ``<root>/<dataset_id>`` (an atomic snapshot with a manifest:
    ``rl_profiling.atomic``); later loads map those files, with no copy, and read rows
    from the page cache when they are sampled. Keys are TorchRL's: ``observation``,
    ``action``, ``episode`` (the Minari episode id) and under ``"next"``:
    ``observation``, ``reward``, ``done``, ``terminated``, ``truncated`` (``[N, 1]``).
    With ``split_trajs=True`` the storage is ``[episodes, max_len]``, zero-padded, with a
    ``mask`` of the real steps, and a sample is ``batch_size`` whole episodes.

    Minari's remote datasets cannot be downloaded here: the dataset must be on local disk
    (recorded with :func:`write_minari_dataset`). A copy or a Minari dataset that is
    incomplete or corrupt raises :class:`DatasetError` naming the file, and nothing is
    written over it; ``download="force"`` rebuilds the copy from the local Minari dataset.

    Attributes:
        metadata: the Minari dataset's ``metadata.json`` (with what its writer stored,
            e.g. ``behaviour_return``), ``dataset_id`` and ``rows``.

    Args:
        dataset_id: the Minari id (e.g. ``"mujoco/halfcheetah/medium-v0"``).
        batch_size: rows per ``sample()``.
        root: where the memory-mapped copies live (``<root>/<dataset_id>``); default
            ``~/.cache/rl_replay/minari``.
        download: ``True`` (TorchRL's default: fetch if missing; here that means read the
            local Minari dataset, as no remote one is reachable), ``False`` (use the
            copy only) or ``"force"`` (rebuild the copy).
        sampler: a sampler (default :class:`RandomSampler`).
        transform: applied to each sample.
        split_trajs: store whole episodes ``[episodes, max_len]`` with a ``mask``.
        load_from_local_minari: read the dataset from Minari's local folder
            (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``), as TorchRL.
        **kwargs: other :class:`TensorDictReplayBuffer` arguments (``prefetch``,
            ``collate_fn``, ``generator``).

    Raises:
        DatasetError: the dataset is not local, or a file of it or of its copy is missing
            or corrupt (named).
        ImportError: minari is not installed and the copy must be built.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import write_minari_dataset
        >>> done = torch.zeros(1, 4, 1, dtype=torch.bool)
        >>> done[:, -1] = True
        >>> batch = TensorDict({"observation": torch.randn(1, 4, 3), "action": torch.randn(1, 4, 1),
        ...     "next": {"observation": torch.randn(1, 4, 3), "reward": torch.randn(1, 4, 1),
        ...              "done": done, "terminated": done}}, [1, 4])
        >>> minari_root, root = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> _ = write_minari_dataset("demo/doc-v0", [batch], root=minari_root)
        >>> import os; os.environ["MINARI_DATASETS_PATH"] = minari_root
        >>> rb = MinariExperienceReplay("demo/doc-v0", 2, root=root, load_from_local_minari=True)
        >>> len(rb), rb.sample()["next", "done"].shape
        (4, torch.Size([2, 1]))
        >>> del os.environ["MINARI_DATASETS_PATH"]
        >>> import shutil; shutil.rmtree(minari_root); shutil.rmtree(root)
    """

    def __init__(
        self,
        dataset_id: str,
        batch_size: int,
        *,
        root: Any = None,
        download: bool | str = True,
        sampler: Sampler | None = None,
        transform: Any = None,
        split_trajs: bool = False,
        load_from_local_minari: bool = False,
        **kwargs: Any,
    ) -> None:
        if download not in (True, False, "force"):
            raise ValueError(f"download: expected True, False or 'force', got {download!r}")
        self.dataset_id, self.split_trajs = dataset_id, split_trajs
        self.root = Path(root) if root is not None else _default_root()
        copies = AtomicDirectory(self.root / dataset_id / ("split" if split_trajs else "flat"),
                                 keep=1, error=DatasetError)
        if download == "force" or copies.latest_name() is None:
            if download is False:
                raise DatasetError(f"{copies.root}: no copy of {dataset_id!r} and download=False; "
                                   f"pass load_from_local_minari=True to build it ({MAKE_ONE})")
            self._build(copies, load_from_local_minari)
        data, manifest = self._map(copies)
        self._max_len = data["mask"].shape[1] if split_trajs else 0
        self.metadata = {**manifest.get("minari_metadata", {}), "dataset_id": dataset_id,
                         "rows": manifest["rows"]}
        super().__init__(storage=_MappedStorage(data), sampler=sampler or RandomSampler(),
                         writer=ImmutableDatasetWriter(), batch_size=batch_size,
                         transform=transform, **kwargs)

    def sample(self, batch_size: int | None = None, *args: Any, **kwargs: Any) -> Any:
        """``batch_size`` transitions (``[B]``), or whole episodes (``[B, max_len]``) with
        ``split_trajs``; see :meth:`TensorDictReplayBuffer.sample`."""
        return self._episodes(super().sample(batch_size, *args, **kwargs))

    def __getitem__(self, index: Any) -> Any:
        return self._episodes(super().__getitem__(index))

    def _episodes(self, data: Any) -> Any:
        """With ``split_trajs``, rows of episodes ``[B]`` -> ``[B, max_len]`` (a row-level
        entry such as ``index`` is repeated along time)."""
        if not self.split_trajs or not isinstance(data, TensorDictBase):
            return data
        batch = (*data.batch_size, self._max_len)
        out = TensorDict({}, batch)
        for key, value in data.items(True, True):
            if value.shape[: len(batch)] != batch:
                value = value.reshape(*data.batch_size, 1, *value.shape[data.batch_dims:])
                value = value.expand(*batch, *value.shape[len(batch):])
            out.set(key, value)
        return out

    def _build(self, copies: AtomicDirectory, load_from_local_minari: bool) -> None:
        source = minari_dataset_dir(self.dataset_id)
        if not source.exists():
            how = "" if load_from_local_minari else " (and load_from_local_minari=False)"
            raise DatasetError(
                f"dataset {self.dataset_id!r} is not on local disk: no {source}{how}. Minari's "
                f"remote datasets cannot be downloaded here; the dataset must be local: "
                f"{MAKE_ONE}")
        data = _read_episodes(source)
        meta = json.loads((source / _DATA / "metadata.json").read_text())
        if self.split_trajs:
            data = _split(data)
        tmp = copies.begin()
        try:
            data.memmap_(tmp / _DATA)
        except BaseException:
            copies.abort(tmp)
            raise
        copies.commit(tmp, {"format": _FORMAT, "dataset_id": self.dataset_id,
                            "source": str(source), "rows": data.batch_size[0],
                            "minari_metadata": meta},
                      size_only=(f"{_DATA}/*",))

    @staticmethod
    def _map(copies: AtomicDirectory) -> tuple[TensorDict, dict]:
        latest = copies.latest()
        if latest is None:
            raise DatasetError(f"{copies.root / copies.latest_name()}: the copy is incomplete "
                               "(no manifest); rebuild it with download='force'")
        problem = copies.verify(latest)
        if problem is not None:
            raise DatasetError(f"{latest / problem.split(':')[0]}: the memory-mapped copy is "
                               f"corrupt ({problem}); nothing was written over it: rebuild it "
                               "with download='force'")
        manifest = json.loads((latest / "manifest.json").read_text())
        return TensorDict.load_memmap(latest / _DATA), manifest
