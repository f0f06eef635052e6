"""``Composite``: a (nested) mapping of key to spec, with a common leading batch shape."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rl_envs._specs import ShapeLike, SpecError, TensorSpec, _device, _size

__all__ = ["Composite"]

Key = str | tuple[str, ...]


def _as_tuple(key: Key) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)


def _unwrap(key: tuple[str, ...]) -> Key:
    return key[0] if len(key) == 1 else key


class Composite:
    """A nested mapping of keys to specs whose shapes all start with ``shape`` (the batch).

    Args:
        specs: mapping of key to spec (a nested ``dict`` becomes a nested ``Composite``).
        shape: the batch shape shared by every entry.
        device: device of the entries.
        **kwargs: more entries.

    Examples:
        >>> from rl_envs import Bounded, Categorical
        >>> spec = Composite(observation=Bounded(-1.0, 1.0, shape=(8, 4)), shape=(8,))
        >>> spec["action"] = Categorical(2, shape=(8,))
        >>> td = spec.rand()
        >>> td.batch_size
        torch.Size([8])
        >>> spec.is_in(td)
        True
    """

    def __init__(
        self,
        specs: Mapping[str, Any] | None = None,
        shape: ShapeLike = (),
        device: Any = None,
        **kwargs: Any,
    ):
        self.shape = _size(shape)
        self.device = _device(device)
        self._specs: dict[str, TensorSpec | Composite] = {}
        for key, spec in {**(specs or {}), **kwargs}.items():
            self[key] = spec

    # -- mapping ------------------------------------------------------------------------
    def __setitem__(self, key: Key, spec: Any) -> None:
        key = _as_tuple(key)
        if isinstance(spec, Mapping) and not isinstance(spec, Composite):
            spec = Composite(spec, shape=self.shape, device=self.device)
        if not isinstance(spec, (TensorSpec, Composite)):
            raise TypeError(
                f"Composite[{_unwrap(key)!r}]: expected a spec, received {type(spec).__name__}"
            )
        if spec.shape[: len(self.shape)] != self.shape:
            raise SpecError(
                f"Composite[{_unwrap(key)!r}]: the spec's shape {tuple(spec.shape)} must start "
                f"with the batch shape {tuple(self.shape)}"
            )
        if len(key) > 1:
            sub = self._specs.get(key[0])
            if sub is None:
                sub = self._specs[key[0]] = Composite(shape=self.shape, device=self.device)
            if not isinstance(sub, Composite):
                raise KeyError(f"Composite: {key[0]!r} is a leaf, cannot set {key!r}")
            sub[key[1:]] = spec
            return
        self._specs[key[0]] = spec

    def __getitem__(self, key: Key) -> Any:
        key = _as_tuple(key)
        spec: Any = self
        for i, k in enumerate(key):
            if not isinstance(spec, Composite) or k not in spec._specs:
                raise KeyError(
                    f"Composite has no key {_unwrap(key[: i + 1])!r}; keys: "
                    f"{list(self.keys(True, True))}"
                )
            spec = spec._specs[k]
        return spec

    def __delitem__(self, key: Key) -> None:
        key = _as_tuple(key)
        parent = self[key[:-1]] if len(key) > 1 else self
        del parent._specs[key[-1]]

    def __contains__(self, key: Key) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def get(self, key: Key, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Key]:
        """Keys, optionally nested (as tuples) and restricted to the leaves (TorchRL order)."""
        out: list[Key] = []
        for k, spec in self._specs.items():
            is_comp = isinstance(spec, Composite)
            if not (leaves_only and is_comp):
                out.append(k)
            if include_nested and is_comp:
                out.extend((k, *_as_tuple(sub)) for sub in spec.keys(True, leaves_only))
        return out

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> list[tuple[Key, Any]]:
        return [(k, self[k]) for k in self.keys(include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        return [self[k] for k in self.keys(include_nested, leaves_only)]

    def update(self, other: Composite | Mapping[str, Any]) -> Composite:
        for k, v in (other.items() if isinstance(other, Composite) else other.items()):
            self[k] = v
        return self

    # -- values -------------------------------------------------------------------------
    def _build(self, fn: Any, shape: ShapeLike | None) -> TensorDict:
        data = {
            k: spec._build(fn, shape) if isinstance(spec, Composite) else fn(spec)
            for k, spec in self._specs.items()
        }
        return TensorDict(data, batch_size=(*_size(shape), *self.shape), device=self.device)

    def zero(self, shape: ShapeLike | None = None) -> TensorDict:
        """A zero-filled TensorDict of batch size ``(*shape, *self.shape)``."""
        return self._build(lambda s: s.zero(shape), shape)

    def rand(
        self, shape: ShapeLike | None = None, *, generator: torch.Generator | None = None
    ) -> TensorDict:
        """A random valid TensorDict."""
        return self._build(lambda s: s.rand(shape, generator=generator), shape)

    def mismatches(self, td: TensorDictBase, prefix: tuple[str, ...] = ()) -> list[str]:
        """One readable line per key of the spec that ``td`` lacks or violates."""
        out = []
        for k, spec in self._specs.items():
            key = (*prefix, k)
            if k not in td:
                out.append(f"{_unwrap(key)!r}: missing (expected {spec!r})")
                continue
            value = td.get(k)
            if isinstance(spec, Composite):
                if not isinstance(value, TensorDictBase):
                    out.append(
                        f"{_unwrap(key)!r}: expected a TensorDict, received {type(value).__name__}"
                    )
                else:
                    out.extend(spec.mismatches(value, key))
                continue
            msg = spec.mismatch(value)
            if msg is not None:
                out.append(f"{_unwrap(key)!r}: {msg}")
        return out

    def is_in(self, td: TensorDictBase) -> bool:
        return not self.mismatches(td)

    def assert_is_in(self, td: TensorDictBase, error: type = SpecError) -> None:
        bad = self.mismatches(td)
        if bad:
            raise error("value does not match the spec:\n  " + "\n  ".join(bad))

    def project(self, td: TensorDictBase) -> TensorDictBase:
        for k, spec in self._specs.items():
            if k in td:
                td.set(k, spec.project(td.get(k)))
        return td

    # -- transforms of the spec ---------------------------------------------------------
    def expand(self, *shape: Any) -> Composite:
        new = _size(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        if new[len(new) - len(self.shape) :] != self.shape or len(new) < len(self.shape):
            raise SpecError(
                f"Composite.expand: the new shape must end with {tuple(self.shape)}, received "
                f"{tuple(new)}"
            )
        lead = new[: len(new) - len(self.shape)]
        return Composite(
            {k: s.expand((*lead, *s.shape)) for k, s in self._specs.items()},
            shape=new,
            device=self.device,
        )

    def to(self, device: Any) -> Composite:
        return Composite(
            {k: s.to(device) for k, s in self._specs.items()}, shape=self.shape, device=device
        )

    def clone(self) -> Composite:
        return Composite(
            {k: s.clone() for k, s in self._specs.items()}, shape=self.shape, device=self.device
        )

    def empty(self) -> Composite:
        return Composite(shape=self.shape, device=self.device)

    def select(self, *keys: Key) -> Composite:
        out = self.empty()
        for k in keys:
            out[k] = self[k].clone()
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Composite)
            and self.shape == other.shape
            and self.keys() == other.keys()
            and all(self._specs[k] == other._specs[k] for k in self._specs)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ",\n".join(
            f"    {k}: " + repr(v).replace("\n", "\n    ") for k, v in self._specs.items()
        )
        return f"Composite(\n{inner},\n    shape={tuple(self.shape)})"
