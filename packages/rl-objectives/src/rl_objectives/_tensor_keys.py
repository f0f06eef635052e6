"""The ``set_keys`` mechanism shared by estimators and losses."""

from __future__ import annotations

import dataclasses
from typing import Any

from tensordict import TensorDictBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives.exceptions import MissingKeyError

__all__ = ["KeyedModule", "StepKeys", "get_key"]


def get_key(tensordict: TensorDictBase, key: Any, owner: str) -> Any:
    """``tensordict.get(key)`` with an error that names the key, the owner and the keys."""
    value = tensordict.get(key, None)
    if value is None:
        present = sorted(str(k) for k in tensordict.keys(include_nested=True, leaves_only=True))
        raise MissingKeyError(
            f"{owner} needs the key {key!r} in its input TensorDict "
            f"(batch_size={tuple(tensordict.batch_size)}), which has: {present}; "
            f"rename it with set_keys(...) if it lives under another name"
        )
    return value


@dataclasses.dataclass
class StepKeys:
    """The key roles every estimator and loss reads under ``"next"``.

    Each module's ``_AcceptedKeys`` extends this dataclass with its own roles.

    Attributes:
        reward: the reward, read under ``"next"``.
        done: the done flag, read under ``"next"``.
        terminated: the terminated flag, read under ``"next"``.
    """

    reward: NestedKey = _keys.REWARD
    done: NestedKey = _keys.DONE
    terminated: NestedKey = _keys.TERMINATED


class KeyedModule:
    """Mixin: a ``tensor_keys`` dataclass instance editable with ``set_keys(**keys)``.

    Subclasses define a nested ``_AcceptedKeys`` dataclass whose fields are the key roles
    and whose defaults are TorchRL's key names.
    """

    _AcceptedKeys: type

    def _init_keys(self) -> None:
        self.tensor_keys = self._AcceptedKeys()

    def set_keys(self, **keys: Any) -> KeyedModule:
        """Rename the keys this module reads and writes.

        Args:
            **keys: role name to key (a string or a tuple of strings).

        Returns:
            ``self``.

        Raises:
            ValueError: a role is not one of ``tensor_keys``' fields.
        """
        fields = {f.name for f in dataclasses.fields(self._AcceptedKeys)}
        for role, key in keys.items():
            if role not in fields:
                raise ValueError(
                    f"set_keys: {role!r} is not a key of {type(self).__name__}; "
                    f"expected one of {sorted(fields)}"
                )
            if key is None:
                raise ValueError(f"set_keys: the key for {role!r} must not be None")
            setattr(self.tensor_keys, role, key)
        return self
