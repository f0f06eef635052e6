"""Collector batches -> a Minari dataset on local disk (so users record their own)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_replay._minari_io import import_minari, minari_dataset_dir
from rl_replay.exceptions import DatasetError

__all__ = ["write_minari_dataset"]

_KEYS = {"observation": "observation", "action": "action", "reward": ("next", "reward"),
         "terminated": ("next", "terminated"), "truncated": ("next", "truncated"),
         "done": ("next", "done"), "next_observation": ("next", "observation")}


def _rows(batch: TensorDictBase) -> dict[str, np.ndarray]:
    """The batch's step fields as numpy copies, ``[N, T, ...]`` (env dims flattened)."""
    if not isinstance(batch, TensorDictBase) or batch.batch_dims < 1:
        raise DatasetError(
            f"batches: expected TensorDicts shaped [*env_batch, T] (collector batches), got "
            f"{type(batch).__name__} {getattr(batch, 'batch_size', '')}")
    time = batch.batch_size[-1]
    out = {}
    for name, key in _KEYS.items():
        value = batch.get(key, None)
        if value is None and name == "truncated":
            value = torch.zeros_like(batch.get(_KEYS["done"]))
        if value is None:
            present = sorted(map(str, batch.keys(True, True)))
            raise DatasetError(f"batches: a batch lacks the key {key!r} (it has {present})")
        value = value.reshape(-1, time, *value.shape[batch.batch_dims:])
        out[name] = value.detach().cpu().numpy().copy()
    for name in ("reward", "terminated", "truncated", "done"):
        out[name] = out[name].reshape(out[name].shape[0], time)
    return out


class _Episodes:
    """Cuts per-env step streams into episodes; an episode ends where ``done`` is set."""

    def __init__(self) -> None:
        self.pending: dict[int, list[dict[str, np.ndarray]]] = {}
        self.steps = 0

    def add(self, rows: dict[str, np.ndarray]) -> list[Any]:
        finished = []
        for env in range(rows["done"].shape[0]):
            ends = np.flatnonzero(rows["done"][env]).tolist()
            start = 0
            for end in ends:
                self.pending.setdefault(env, []).append(self._slice(rows, env, start, end + 1))
                finished.append(self._episode(self.pending.pop(env), truncate=False))
                start = end + 1
            if start < rows["done"].shape[1]:
                part = self._slice(rows, env, start, rows["done"].shape[1])
                self.pending.setdefault(env, []).append(part)
        return finished

    @staticmethod
    def _slice(rows: dict[str, np.ndarray], env: int, start: int, stop: int) -> dict:
        return {name: value[env, start:stop] for name, value in rows.items()}

    def _episode(self, parts: list[dict[str, np.ndarray]], *, truncate: bool) -> Any:
        from minari.data_collector import EpisodeBuffer

        cat = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        truncations = cat["truncated"].astype(bool)
        if truncate:
            truncations[-1] = True
        self.steps += len(cat["reward"])
        return EpisodeBuffer(
            observations=np.concatenate([cat["observation"], cat["next_observation"][-1:]]),
            actions=cat["action"], rewards=cat["reward"].astype(np.float64),
            terminations=cat["terminated"].astype(bool), truncations=truncations, infos={})

    def flush(self, unfinished: str) -> list[Any]:
        parts = [self.pending.pop(env) for env in sorted(self.pending)]
        return [self._episode(p, truncate=True) for p in parts] if unfinished == "truncate" else []


def _space(value: np.ndarray, like: Any = None) -> Any:
    """A Box of the data's event shape and dtype, with the bounds of ``like`` (the env's own
    space) where it is a Box of that shape, else unbounded."""
    import gymnasium as gym

    shape = value.shape[2:]
    if isinstance(like, gym.spaces.Box) and like.shape == shape:
        return gym.spaces.Box(like.low.astype(value.dtype), like.high.astype(value.dtype),
                              shape=shape, dtype=value.dtype)
    return gym.spaces.Box(-np.inf, np.inf, shape=shape, dtype=value.dtype)


def _env_spaces(env_id: str | None) -> tuple[Any, Any]:
    """The observation and action spaces of ``gymnasium.make(env_id)`` (``None`` without)."""
    if env_id is None:
        return None, None
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _new_storage(data_path: Path, rows: dict, env_id: str | None, spaces: tuple) -> Any:
    import gymnasium as gym
    from minari.dataset.minari_storage import MinariStorage

    observation_space, action_space = spaces
    if observation_space is None or action_space is None:
        env_obs, env_act = _env_spaces(env_id)
        if observation_space is None:
            observation_space = _space(rows["observation"], env_obs)
        if action_space is None:
            action_space = _space(rows["action"], env_act)
    env_spec = gym.spec(env_id) if env_id is not None else None
    return MinariStorage.new(
        data_path, observation_space=observation_space, action_space=action_space,
        env_spec=env_spec, data_format="hdf5")


def write_minari_dataset(
    dataset_id: str,
    batches: Iterable[TensorDictBase],
    *,
    root: Any = None,
    env_id: str | None = None,
    observation_space: Any = None,
    action_space: Any = None,
    unfinished: str = "truncate",
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Write collector batches as a Minari dataset (HDF5) under ``<root>/<dataset_id>``.

    Each batch is ``[*env_batch, T]`` (time last, any env batch shape: ``[]``, ``[N]``,
    ...), as a ``Collector`` yields them, so a ``Collector`` running the policy to record
    can be passed as ``batches``. Per env, steps are cut into episodes where
    ``("next", "done")`` is set; an episode may span batches. An episode still running
    after the last batch is written with its last step marked truncated
    (``unfinished="truncate"``: its final next observation is real) or left out
    (``"drop"``). Minari's ``observations`` hold ``T + 1`` rows: the episode's
    observations and its final next observation.

    The dataset is written into ``<dataset_id>.tmp`` and renamed into place when complete:
    an interrupted write leaves no dataset behind, and an existing dataset is never
    written over.

    Args:
        dataset_id: the Minari id (``"namespace/name-v0"`` style; a path under ``root``).
        batches: collector batches with ``observation``, ``action`` and ``"next"``
            (``observation``, ``reward``, ``done``, ``terminated``, ``truncated``).
        root: Minari's dataset folder (default: ``$MINARI_DATASETS_PATH``, else
            ``~/.minari/datasets``).
        env_id: the gymnasium id of the env (stored as the dataset's env spec, so
            ``MinariDataset.recover_environment()`` works).
        observation_space: a gymnasium space (default: a Box of the data's shape and
            dtype, with the bounds of ``env_id``'s own space where it is a Box of that
            shape, else unbounded).
        action_space: a gymnasium space (default: as ``observation_space``'s, from the
            env's action space: ``Pendulum-v1``'s actions are bounded by ``[-2, 2]``).
        unfinished: ``"truncate"`` or ``"drop"`` for episodes still running at the end.
        metadata: extra dataset metadata (``algorithm_name``, ``author``, ``description``,
            ...), stored in Minari's ``metadata.json``.

    Returns:
        The dataset's folder.

    Raises:
        DatasetError: the dataset exists already, a batch is malformed, or no episode was
            written.
        ImportError: minari is not installed (the ``rl-replay[minari]`` extra).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> done = torch.zeros(2, 5, 1, dtype=torch.bool)
        >>> done[:, -1] = True
        >>> batch = TensorDict({"observation": torch.randn(2, 5, 3),
        ...     "action": torch.randn(2, 5, 1),
        ...     "next": {"observation": torch.randn(2, 5, 3), "reward": torch.randn(2, 5, 1),
        ...              "done": done, "terminated": done, "truncated": ~done & done}},
        ...     [2, 5])
        >>> root = tempfile.mkdtemp()
        >>> path = write_minari_dataset("demo/tiny-v0", [batch], root=root)
        >>> sorted(p.name for p in (path / "data").iterdir())
        ['main_data.hdf5', 'metadata.json']
        >>> import shutil; shutil.rmtree(root)
    """
    minari = import_minari()
    if unfinished not in ("truncate", "drop"):
        raise ValueError(f"unfinished: expected 'truncate' or 'drop', got {unfinished!r}")
    final = minari_dataset_dir(dataset_id, root)
    if final.exists():
        raise DatasetError(f"dataset_id: a dataset exists at {final}; it is not written over "
                           "(delete it or choose another id)")
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # an earlier write killed midway
    (tmp / "data").mkdir(parents=True)
    try:
        storage = _fill(tmp / "data", batches, env_id, (observation_space, action_space),
                        unfinished)
        storage.update_metadata({"dataset_id": dataset_id, "minari_version":
                                 minari.__version__, **(metadata or {})})
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _fill(data_path: Path, batches: Iterable[TensorDictBase], env_id: str | None,
          spaces: tuple, unfinished: str) -> Any:
    episodes, storage = _Episodes(), None
    for batch in batches:
        rows = _rows(batch)
        if storage is None:
            storage = _new_storage(data_path, rows, env_id, spaces)
        finished = episodes.add(rows)
        if finished:
            storage.update_episodes(finished)
    if storage is None:
        raise DatasetError("batches: no batch was given; nothing to write")
    tail = episodes.flush(unfinished)
    if tail:
        storage.update_episodes(tail)
    if storage.total_episodes == 0:
        raise DatasetError("batches: no complete episode in the batches (unfinished='drop')")
    return storage
