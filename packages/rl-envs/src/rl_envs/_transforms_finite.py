"""``FiniteTensorDictCheck``: raise at the first NaN or inf an env step produces."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._transforms import Transform
from rl_envs.exceptions import NonFiniteError

__all__ = ["FiniteTensorDictCheck"]


def _float_leaves(td: TensorDictBase, prefix: tuple = ()) -> list[tuple[tuple, Any]]:
    out = []
    for key in td.keys(True, True):
        value = td.get(key)
        if isinstance(value, torch.Tensor) and value.dtype.is_floating_point:
            out.append(((*prefix, *((key,) if isinstance(key, str) else key)), value))
    return out


class FiniteTensorDictCheck(Transform):
    """Raise when an entry of a step's output (or of a reset's) is NaN or infinite.

    TorchRL's ``FiniteTensorDictCheck`` (no arguments; every entry checked), with an error
    that names the key, the sub-env and the step: :class:`~rl_envs.NonFiniteError` (a
    ``ValueError``, as TorchRL raises). Floating-point actions are checked on their way
    into the env too. The check runs each step (one ``isfinite`` per floating-point leaf,
    in numpy for CPU leaves); the collectors' ``check_finite=True`` checks a whole batch
    at once, for less.

    Examples:
        >>> import pytest
        >>> from rl_envs import Compose, GymEnv, RewardScaling, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), FiniteTensorDictCheck())
        >>> env.rollout(3).batch_size
        torch.Size([2, 3])
        >>> env.close()
        >>> broken = RewardScaling(loc=0.0, scale=float("nan"))  # a reward turned NaN
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2),
        ...                      Compose(broken, FiniteTensorDictCheck()))
        >>> with pytest.raises(ValueError, match="'reward'. is not finite at sub-env 0 at step 1"):
        ...     _ = env.rollout(3)
        >>> env.close()
    """

    def __init__(self) -> None:
        super().__init__(in_keys=[])
        self._root: list[tuple[tuple, Any]] = []
        self._next: list[tuple[tuple, Any]] = []
        self.steps = 0  # steps taken through this transform

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._batch = root.batch_size
        self._root = [(k, self._view(v)) for k, v in _float_leaves(root)]
        self._next = [(("next", *k), self._view(v)) for k, v in _float_leaves(next)]
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._check(self._root, "after a reset")

    def on_step(self) -> torch.Tensor | None:
        self.steps += 1
        self._check(self._next, f"at step {self.steps}")
        return None

    def inv_action(self, action: Any) -> Any:
        if isinstance(action, torch.Tensor) and action.dtype.is_floating_point:
            self._check([(("action",), action)], f"at step {self.steps + 1} (the action)")
        return action

    def _check(self, leaves: list[tuple[tuple, Any]], when: str) -> None:
        for key, value in leaves:
            finite = np.isfinite(value) if isinstance(value, np.ndarray) else torch.isfinite(value)
            if bool(finite.all()):
                continue
            bad = ~torch.as_tensor(finite).reshape(*self._batch, -1).all(-1)
            index = tuple(int(i) for i in torch.nonzero(bad.reshape(*self._batch))[0])
            where = f"at sub-env {index[0] if len(index) == 1 else index} " if index else ""
            name = key[0] if len(key) == 1 else key
            raise NonFiniteError(
                f"FiniteTensorDictCheck: {name!r} is not finite {where}{when}: "
                f"{torch.as_tensor(value)[index].tolist()}"
            )
