"""How a module holds the env's spec: one action's spec (batch dims stripped), checked or
projected on the module's output.

An env's specs carry its batch shape in front (``[num_envs, n]``); a module sees batches
of any size (``[num_envs]`` while collecting, ``[minibatch]`` in the loss). So the module
keeps the spec of a single value (``event_spec``) and broadcasts it to what it writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import Binary, Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded
from rl_envs.exceptions import SpecError
from tensordict import TensorDictBase

from rl_modules.exceptions import ActionSpecError

__all__ = ["SpecGuard", "event_spec"]

CHECKED_CALLS = 4
"""Outputs checked against the spec when ``safe=False``: the first few calls (a wrong
distribution or wrong bounds shows at once), then nothing on the hot path."""


def _default_event_dims(spec: Any) -> int:
    if isinstance(spec, Categorical):
        return 0
    return min(1, len(spec.shape))


def event_spec(spec: Any, event_dims: int | None = None) -> Any:
    """The spec of one value: ``spec`` without its leading batch dims.

    Args:
        spec: a leaf spec of ``rl_envs`` (batched or not).
        event_dims: trailing dims that form one value (default: 0 for ``Categorical``, 1
            for the others, 0 for a scalar spec).

    Returns:
        A spec of the same type whose shape is the value's own; bounds and ``nvec`` are
        those of the first batch element (a vector env's sub-envs share them).

    Examples:
        >>> from rl_envs import Bounded
        >>> event_spec(Bounded(-1.0, 1.0, shape=(8, 3))).shape
        torch.Size([3])
    """
    nd = _default_event_dims(spec) if event_dims is None else int(event_dims)
    lead = len(spec.shape) - min(nd, len(spec.shape))
    shape, first = spec.shape[lead:], (0,) * lead
    common = {"device": spec.device, "dtype": spec.dtype}
    if isinstance(spec, Bounded):
        return Bounded(spec.low[first], spec.high[first], shape=shape, **common)
    if isinstance(spec, MultiCategorical):
        return MultiCategorical(spec.nvec[first], shape=shape, **common)
    if isinstance(spec, (Categorical, OneHot, Binary)):
        return type(spec)(spec.n, shape=shape, **common)
    if isinstance(spec, Unbounded):
        return Unbounded(shape=shape, **common)
    raise TypeError(f"spec: expected an rl_envs leaf spec, received {type(spec).__name__}")


def _leaf_specs(spec: Any, out_keys: Sequence[Any]) -> dict[Any, Any]:
    """``{out_key: leaf spec}``: a leaf spec stands for the first out key."""
    if spec is None:
        return {}
    if isinstance(spec, Composite):
        return {k: spec[k] for k in out_keys if k in spec}
    return {out_keys[0]: spec}


class SpecGuard:
    """Check (the first calls) or project (every call) a module's outputs on their specs.

    Args:
        spec: a leaf spec for the first out key, a ``Composite`` keyed by out keys, or
            ``None`` (the guard does nothing).
        out_keys: the module's out keys.
        safe: project every output into its spec (``spec.project``), as TorchRL's
            ``safe=True``; otherwise check the first ``CHECKED_CALLS`` outputs and raise
            ``ActionSpecError`` naming the key, the expected and the received value.
    """

    def __init__(self, spec: Any, out_keys: Sequence[Any], safe: bool = False) -> None:
        self.specs = {k: event_spec(s) for k, s in _leaf_specs(spec, out_keys).items()}
        if safe and not self.specs:
            raise ValueError("safe=True needs a spec to project the outputs on, received spec=None")
        self.safe = safe
        self.checks_left = CHECKED_CALLS if self.specs else 0

    @property
    def active(self) -> bool:
        return self.safe or self.checks_left > 0

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        if self.safe:
            for key, spec in self.specs.items():
                value = td.get(key)
                td.set(key, self._on(spec, value, key).project(value))
        elif self.checks_left > 0:
            self.checks_left -= 1
            for key, spec in self.specs.items():
                check_value(spec, td.get(key), key)
        return td

    def _on(self, spec: Any, value: torch.Tensor, key: Any) -> Any:
        if spec.device != value.device:  # the module moved: follow it once
            spec = self.specs[key] = spec.to(value.device)
        return spec


def check_value(spec: Any, value: torch.Tensor, key: Any) -> None:
    """Raise ``ActionSpecError`` unless ``value`` is a batch of values of the one-value ``spec``.

    Integer and bool dtypes are interchangeable for discrete specs (a one-hot sample is
    ``long``, a ``OneHot`` spec may be ``bool``); floating vs discrete is an error.
    """
    if value.dtype.is_floating_point != spec.dtype.is_floating_point:
        raise ActionSpecError(
            f"{key!r}: expected {spec.dtype} values for {spec!r}, received {value.dtype}"
        )
    try:
        full = spec.expand(value.shape)
    except SpecError:
        raise ActionSpecError(
            f"{key!r}: expected a shape ending with {tuple(spec.shape)} for {spec!r}, "
            f"received {tuple(value.shape)}"
        ) from None
    msg = full.mismatch(value.to(spec.dtype))
    if msg is not None:
        raise ActionSpecError(f"{key!r}: {msg} (spec of one value: {spec!r})")
