"""``FrameSkipTransform``: repeat each action ``frame_skip`` times, summing the rewards."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._transforms import Transform

__all__ = ["FrameSkipTransform"]


class FrameSkipTransform(Transform):
    """TorchRL's ``FrameSkipTransform(frame_skip)``: each step repeats the action
    ``frame_skip`` times on the env below, sums the rewards, and stops early at the first
    inner step where a sub-env is done (that step's observation and done flags are the
    output; on a vector env every sub-env stops there, as ``GymEnv(frame_skip=)`` does).

    It must be the first transform of its ``TransformedEnv`` (it steps the base env
    itself, so transforms before it would miss the repeated steps).

    Args:
        frame_skip: how many times each action is applied, an int ``>= 1``.

    Raises:
        ValueError: ``frame_skip`` is not an int ``>= 1``; on the first step, the transform
            is not the first of its chain.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), FrameSkipTransform(3))
        >>> _ = env.set_seed(0)
        >>> rollout = env.rollout(4)
        >>> bool((rollout["next", "reward"] <= 3).all()), rollout.batch_size
        (True, torch.Size([2, 4]))
        >>> env.close()
    """

    def __init__(self, frame_skip: int = 1) -> None:
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, int) or frame_skip < 1:
            raise ValueError(
                f"FrameSkipTransform: frame_skip must be an int >= 1, received {frame_skip!r}"
            )
        super().__init__(in_keys=[])
        self.frame_skip = frame_skip
        self._action: Any = None
        self._next: TensorDictBase | None = None

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        owner = self._owner
        if owner is not None and owner.transform.transforms.index(self) != 0:
            raise ValueError(
                "FrameSkipTransform: expected to be the first transform of its TransformedEnv "
                f"(it steps the base env itself), found at position "
                f"{owner.transform.transforms.index(self)}"
            )
        self._next = next
        return root, next

    def inv_action(self, action: Any) -> Any:
        self._action = action
        return action

    def on_step(self) -> torch.Tensor | None:
        owner, nxt = self._owner, self._next
        if self.frame_skip == 1 or owner is None or nxt is None:
            return None
        reward = nxt.get("reward")
        total = reward.clone()
        for _ in range(self.frame_skip - 1):
            if bool(nxt.get("done").any()):
                break
            owner.base_env.fast_step(self._action)
            total += reward
        reward.copy_(total)
        return None

    def __repr__(self) -> str:
        return f"FrameSkipTransform(frame_skip={self.frame_skip})"
