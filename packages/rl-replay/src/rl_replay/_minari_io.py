"""What the Minari reader and writer share: the optional import, the local paths and the
field names of a Minari episode (``observations`` has one row more than the others)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from rl_replay.exceptions import DatasetError

__all__ = ["MAKE_ONE", "import_minari", "minari_dataset_dir", "minari_root"]

MAKE_ONE = (
    "make one with rl_replay.write_minari_dataset(dataset_id, batches) from collector "
    "batches (a Collector running your policy), or with benchmarks/make_offline_dataset.py, "
    "then load it with MinariExperienceReplay(dataset_id, batch_size, "
    "load_from_local_minari=True)"
)


def import_minari() -> Any:
    """The ``minari`` module, or an ``ImportError`` saying which extra installs it."""
    if importlib.util.find_spec("minari") is None:
        raise ImportError(
            "Minari datasets need the minari package (Python >= 3.11): install "
            "rl-replay[minari] (pip install 'rl-replay[minari]')"
        )
    import minari

    return minari


def minari_root(root: Any = None) -> Path:
    """Minari's local dataset folder: ``root``, else ``$MINARI_DATASETS_PATH``, else
    ``~/.minari/datasets`` (Minari's own rule)."""
    if root is None:
        root = os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets"
    return Path(root).expanduser().resolve()  # Minari's storage joins relative paths twice


def minari_dataset_dir(dataset_id: str, root: Any = None) -> Path:
    """``<minari root>/<dataset_id>``: a Minari dataset's folder (its files under ``data/``).

    Raises:
        DatasetError: ``dataset_id`` is empty or climbs out of the root.
    """
    if not isinstance(dataset_id, str) or not dataset_id or ".." in Path(dataset_id).parts:
        raise DatasetError(
            f"dataset_id: expected a non-empty Minari id such as 'mujoco/halfcheetah/"
            f"medium-v0', got {dataset_id!r}"
        )
    return minari_root(root) / dataset_id
