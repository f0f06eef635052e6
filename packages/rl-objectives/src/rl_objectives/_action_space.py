"""A loss's ``action_space`` argument: a name or an action spec, as TorchRL takes it.

TorchRL's losses accept ``"one-hot"`` / ``"categorical"`` (and its other spellings) or a
spec (``OneHot``, ``Categorical``, a ``Composite`` holding an ``"action"`` entry) and read
the kind from the spec's class. rl-objectives may not import rl-envs (the package graph),
so a spec is recognised by the class names in its MRO: rl-envs' specs, TorchRL's old
``*TensorSpec`` aliases (the same classes) and subclasses all qualify.
"""

from __future__ import annotations

from typing import Any

__all__ = ["find_action_space"]

_NAMES = {"one-hot": "one-hot", "one_hot": "one-hot", "categorical": "categorical"}
# TorchRL's other names (its ACTION_SPACE_MAP): known there, not supported by these losses
_UNSUPPORTED = {
    "mult_one_hot", "mult-one-hot", "multi_one_hot", "multi-one-hot", "binary",
    "multi_categorical", "multi-categorical", "multi_discrete", "multi-discrete",
}
_SPECS = {"OneHot": "one-hot", "Categorical": "categorical"}
_UNSUPPORTED_SPECS = ("MultiOneHot", "Binary", "MultiCategorical")


def _class_names(obj: Any) -> list[str]:
    return [cls.__name__ for cls in type(obj).__mro__]


def _action_leaf(spec: Any, owner: str) -> Any:
    """The ``"action"`` entry of a composite spec (else the first leaf named ``action``)."""
    keys = list(spec.keys(True, True))
    if "action" in keys:
        return spec["action"]
    for key in keys:
        if isinstance(key, tuple) and key[-1] == "action":
            return spec[key]
    raise ValueError(
        f"{owner}: action_space is a Composite spec without an 'action' entry "
        f"(keys: {keys}); pass the action's own spec or 'one-hot' / 'categorical'"
    )


def find_action_space(action_space: Any, owner: str) -> str | None:
    """``"one-hot"``, ``"categorical"`` or ``None`` from a name, a spec or ``None``.

    Args:
        action_space: ``None``, a name (``"one-hot"``, ``"one_hot"``, ``"categorical"``),
            or a ``OneHot`` / ``Categorical`` spec, or a ``Composite`` whose ``"action"``
            entry is one.
        owner: the loss's name, for the error messages.

    Returns:
        The kind of action the loss reads, or ``None`` (left to the loss to infer).

    Raises:
        ValueError: a name or a spec TorchRL knows that the losses here do not support
            (multi-one-hot, binary, multi-categorical), an unknown name, or a composite
            spec without an action entry.
        TypeError: anything else.
    """
    if action_space is None:
        return None
    if isinstance(action_space, str):
        if action_space in _NAMES:
            return _NAMES[action_space]
        what = "TorchRL's action space" if action_space in _UNSUPPORTED else "an unknown name"
        raise ValueError(
            f"{owner}: action_space must be 'one-hot', 'categorical', a OneHot / Categorical "
            f"spec or None; received {action_space!r} ({what}, not supported here)"
        )
    names = _class_names(action_space)
    if "Composite" in names:
        action_space = _action_leaf(action_space, owner)
        names = _class_names(action_space)
    for name in names:
        if name in _SPECS:
            return _SPECS[name]
        if name in _UNSUPPORTED_SPECS:
            raise ValueError(
                f"{owner}: action_space must be a OneHot or Categorical spec; received a "
                f"{name} spec (TorchRL's, not supported by this loss here)"
            )
    raise TypeError(
        f"{owner}: action_space must be 'one-hot', 'categorical', a OneHot / Categorical "
        f"spec (or a Composite with an 'action' entry) or None; received "
        f"{type(action_space).__name__}"
    )
