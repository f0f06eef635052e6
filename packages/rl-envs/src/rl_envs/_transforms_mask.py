"""``ActionMask``: refuse actions the env's mask forbids (TorchRL's ``ActionMask``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._specs_discrete import OneHot
from rl_envs._transforms import Transform
from rl_envs.exceptions import InvalidActionError, SpecError

__all__ = ["ActionMask"]


class ActionMask(Transform):
    """Check every action against the boolean mask the env publishes at ``mask_key``.

    TorchRL's ``ActionMask`` (same arguments). The mask ``[*B, n]`` is read from the
    current root (the observation the action answers); a masked-out action raises
    :class:`~rl_envs.InvalidActionError` naming the key and the offending sub-envs, before
    the env steps. Works with categorical (index) and one-hot actions. Unlike TorchRL's,
    the action spec does not carry the mask: ``rand_action`` is not masked (use
    ``rl_modules.MaskedCategorical`` in the policy).

    Args:
        action_key: the action key checked.
        mask_key: the observation key holding the mask (True = allowed).

    Raises:
        SpecError: when the env is built, ``mask_key`` is not an observation key or
            ``action_key`` not an action key.
        InvalidActionError: on ``step``, an action is masked out.

    Examples:
        >>> t = ActionMask()
        >>> (t.action_key, t.mask_key)
        ('action', 'action_mask')
    """

    def __init__(self, action_key: Any = "action", mask_key: Any = "action_mask") -> None:
        super().__init__([mask_key], [])
        self.action_key, self.mask_key = action_key, mask_key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        if self.mask_key not in spec:
            raise SpecError(
                f"ActionMask: mask_key {self.mask_key!r} is not an observation key of the env; "
                f"observation keys: {spec.keys(True, True)}"
            )
        return spec

    def transform_action_spec(self, spec: Composite) -> Composite:
        if self.action_key not in spec:
            raise SpecError(
                f"ActionMask: action_key {self.action_key!r} is not an action key of the env; "
                f"action keys: {spec.keys(True, True)}"
            )
        self._one_hot = isinstance(spec[self.action_key], OneHot)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._mask = root.get(self.mask_key)
        return root, next

    def inv_action(self, action: Any) -> Any:
        value = action.get(self.action_key) if isinstance(action, TensorDictBase) else action
        mask = self._mask.to(torch.bool)
        if self._one_hot:
            bad = (value.to(torch.bool) & ~mask).any(-1)
        else:
            idx = value.long().reshape(*mask.shape[:-1], 1)
            bad = ~mask.gather(-1, idx).squeeze(-1)
        if bad.any():
            rows = bad.nonzero().tolist()
            raise InvalidActionError(
                f"{self.action_key!r}: masked-out action (mask {self.mask_key!r} is False) at "
                f"sub-env(s) {rows}"
            )
        return action
