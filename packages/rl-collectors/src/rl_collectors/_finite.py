"""The collector's non-finite guard (``check_finite=True``): once per batch, one host sync.

SB3's ``VecCheckNan`` checks every step; TorchRL's ``FiniteTensorDictCheck`` transform
does too (rl-envs has it). The collector checks the whole batch at once instead: one
``isfinite().all()`` per checked leaf, reduced on the device, one ``.item()`` (CPU leaves
are read through numpy: a batch of one frame, an off-policy loop's, pays a few
microseconds a leaf, not a torch call's); only when that fails does it search the first
bad element, to name its key, sub-env and step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from rl_envs.exceptions import NonFiniteError

__all__ = ["FiniteCheck"]

_NEXT = "next"


def _unravel(key: Any) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


class FiniteCheck:
    """Checks the env's observations, actions and rewards of a batch for NaN and inf.

    Args:
        env: the collector's env (its specs name the keys checked).
    """

    def __init__(self, env: Any) -> None:
        floats = [k for k, spec in _leaves(env.observation_spec) if spec.dtype.is_floating_point]
        actions = [k for k in env.action_keys if _float_spec(env.full_action_spec, k)]
        rewards = [k for k, spec in _leaves(env.full_reward_spec)]
        self.keys = (
            [_unravel(k) for k in floats + actions]
            + [(_NEXT, *_unravel(k)) for k in floats + rewards]
        )

    def __call__(self, batch: Any, frames_before: int, arrays: dict | None = None) -> None:
        """Raise :class:`~rl_envs.NonFiniteError` naming the first NaN/inf, if any.

        Args:
            batch: a ``[*B, T]`` batch (time last).
            frames_before: frames collected before this batch (for the step named).
            arrays: the batch's leaves as numpy arrays by tuple key, any layout
                (``RolloutWriter.arrays``), when the caller has them: read instead of the
                tensors (no ``Tensor.numpy()`` call a leaf); the tensors name a bad value.
        """
        if arrays is not None and _arrays_finite([arrays[k] for k in self.keys if k in arrays]):
            return
        leaves = [(key, x) for key in self.keys if (x := batch.get(key, None)) is not None]
        if not leaves or _all_finite([x for _, x in leaves]):
            return
        first = None
        for key, x in leaves:
            bad = ~torch.isfinite(x.reshape(*batch.batch_size, -1)).all(-1)
            if not bad.any():
                continue
            where = torch.nonzero(bad.movedim(-1, 0))  # time first: the earliest step
            t, env_index = int(where[0, 0]), tuple(int(i) for i in where[0, 1:])
            if first is None or t < first[1]:
                value = x[(*env_index, t)]
                first = (key, t, env_index, value)
        key, t, env_index, value = first
        rows = max(batch.batch_size[:-1].numel(), 1)
        raise NonFiniteError(
            f"check_finite: {key if len(key) > 1 else key[0]!r} is not finite at sub-env "
            f"{env_index if len(env_index) != 1 else env_index[0]}, step {t} of this batch "
            f"(frame {frames_before + t * rows} of the run): {value.tolist()}. The env or "
            "a transform produced it (a reward or observation), or the policy (an action): "
            "see docs/debugging.md"
        )


_NUMPY_FLOATS = (torch.float32, torch.float64, torch.float16)


def _all_finite(leaves: list[torch.Tensor]) -> bool:
    """Whether every element of every leaf is finite: numpy on CPU leaves it can read (one
    call a leaf, no torch dispatch), else one device reduction and one host sync."""
    if all(x.device.type == "cpu" and x.dtype in _NUMPY_FLOATS for x in leaves):
        return _arrays_finite([x.detach().numpy() for x in leaves])
    return bool(torch.stack([torch.isfinite(x).all() for x in leaves]).all())


def _arrays_finite(arrays: list[np.ndarray]) -> bool:
    """Whether every element of every (float) array is finite: ``False`` sends the caller
    to the tensors, which find and name the bad element."""
    return all(x.dtype.kind != "f" or np.isfinite(x).all() for x in arrays)


def _leaves(spec: Any) -> list[tuple[Any, Any]]:
    return [(key, spec[key]) for key in spec.keys(True, True)]


def _float_spec(spec: Any, key: Any) -> bool:
    try:
        return spec[key].dtype.is_floating_point
    except KeyError:
        return False
