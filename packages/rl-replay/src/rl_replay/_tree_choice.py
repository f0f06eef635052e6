"""Which priority tree a :class:`~rl_replay.PrioritizedSampler` uses."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import torch

from rl_replay._tree import PriorityTree
from rl_replay._tree_numba import NumbaPriorityTree
from rl_replay._tree_triton import TritonPriorityTree, triton_tree_available

__all__ = ["TREE_ENV", "make_priority_tree"]

TREE_ENV = "RL_REPLAY_TREE"
"""Environment variable forcing the tree: ``torch``, ``numba`` or ``triton``."""

_KINDS = {"torch": PriorityTree, "numba": NumbaPriorityTree, "triton": TritonPriorityTree}


def make_priority_tree(capacity: int, device: Any = "cpu", kind: str | None = None) -> PriorityTree:
    """The fastest tree for ``device``: Triton on CUDA, numba on the CPU, else torch.

    Args:
        capacity: number of leaves.
        device: where the tree lives.
        kind: ``"torch"``, ``"numba"`` or ``"triton"`` to force one; by default the
            ``RL_REPLAY_TREE`` environment variable, else the automatic choice:
            :class:`~rl_replay.TritonPriorityTree` on a CUDA device when triton is
            installed, :class:`~rl_replay.NumbaPriorityTree` on the CPU when numba is
            installed, :class:`~rl_replay.PriorityTree` otherwise.

    Returns:
        The tree, with each class's default fanout and top size.

    Raises:
        ValueError: ``kind`` (or ``RL_REPLAY_TREE``) names no tree.
    """
    kind = kind or os.environ.get(TREE_ENV) or None
    if kind is not None:
        if kind not in _KINDS:
            raise ValueError(f"kind ({TREE_ENV}): expected one of {sorted(_KINDS)}, got {kind!r}")
        return _KINDS[kind](capacity, device=device)
    device = torch.device(device)
    if device.type == "cuda" and triton_tree_available(device):
        return TritonPriorityTree(capacity, device=device)
    if device.type == "cpu" and importlib.util.find_spec("numba") is not None:
        return NumbaPriorityTree(capacity, device=device)
    return PriorityTree(capacity, device=device)
