"""``Transform``, ``Compose`` and ``TransformedEnv``, with the fast path.

A transform works in place on the env-owned buffers. ``TransformedEnv`` chains the
buffers: transform ``i`` receives the ``(root, next)`` TensorDicts produced by transform
``i - 1`` (the base env's buffers for the first) and returns its own: a shallow copy
(``td.copy()``, same leaves) plus new leaves for the keys it writes. Untouched keys keep
the base env's tensors, so a transform costs only the ops it really does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from rl_profiling import profiled
from tensordict import TensorDictBase

from rl_envs._action_check import action_needs_check
from rl_envs._composite import Composite
from rl_envs._env import EnvBase
from rl_envs._resets import reset_where

__all__ = ["Compose", "Transform", "TransformedEnv"]


def _walk(transform: Transform) -> list[Transform]:
    """``transform`` and, for a ``Compose``, every transform in it (nested ones too)."""
    return [transform, *(t for sub in getattr(transform, "transforms", ()) for t in _walk(sub))]


def _np_or_tensor(t: torch.Tensor) -> Any:
    return t.numpy() if t.device.type == "cpu" else t


class Transform:
    """Base class: spec hooks plus in-place fast hooks on the buffers.

    Subclasses override what they need:

    - ``transform_observation_spec`` / ``transform_reward_spec`` / ``transform_done_spec`` /
      ``transform_state_spec`` (outer specs from inner ones) and ``transform_action_spec``
      (the outer action spec, when ``inv_action`` maps it to the inner one);
    - ``bind(root, next) -> (root, next)``: allocate output leaves, cache the ones read;
    - ``on_reset(mask)``: the inner env just reset the rows of ``mask`` (``None`` = all);
    - ``on_step()``: the inner env just stepped (finished sub-envs already reset). Return
      a ``[*B]`` bool mask of sub-envs this transform finished (they get reset), or None;
    - ``inv_action(action)``: map an outer action to the inner env's.

    Attributes:
        in_keys: keys read. out_keys: keys written.
    """

    def __init__(self, in_keys: Sequence[Any] | None = None, out_keys: Sequence[Any] | None = None):
        self.in_keys = list(in_keys) if in_keys is not None else []
        self.out_keys = list(out_keys) if out_keys is not None else list(self.in_keys)
        self._owner: TransformedEnv | None = None
        self._np = True

    # -- specs --------------------------------------------------------------------------
    def transform_observation_spec(self, spec: Composite) -> Composite:
        return spec

    def transform_reward_spec(self, spec: Composite) -> Composite:
        return spec

    def transform_done_spec(self, spec: Composite) -> Composite:
        return spec

    def transform_state_spec(self, spec: Composite) -> Composite:
        return spec

    def transform_action_spec(self, spec: Composite) -> Composite:
        return spec

    # -- fast hooks ---------------------------------------------------------------------
    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        pass

    def on_step(self) -> torch.Tensor | None:
        return None

    def inv_action(self, action: Any) -> Any:
        return action

    # -- state (checkpoints) ------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint restores: statistics learned across episodes.

        Empty by default. Per-episode counters (``RewardSum``, ``StepCounter``) are not
        saved on purpose: a resumed env is reset, so its episodes restart from zero.
        """
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            KeyError: ``state`` holds entries this transform does not save.
        """
        if state:
            raise KeyError(
                f"{type(self).__name__}.load_state_dict: expected an empty state, got keys "
                f"{sorted(state)}"
            )

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _view(t: torch.Tensor) -> Any:
        """numpy view of a CPU leaf (cheaper small ops), else the tensor itself."""
        return t.numpy() if t.device.type == "cpu" else t

    @staticmethod
    def _rows(mask: torch.Tensor | None, like: Any) -> Any:
        if mask is None:
            return slice(None)
        return mask.numpy() if isinstance(like, np.ndarray) else mask.to(like.device)

    @property
    def parent(self) -> EnvBase | None:
        """The env this transform sees: the base env plus the transforms before it."""
        owner = self._owner
        if owner is None:
            return None
        before = owner.transform.transforms[: owner.transform.transforms.index(self)]
        return (
            TransformedEnv(owner.base_env, Compose(*before), _attach=False)
            if before
            else owner.base_env
        )

    def clone(self) -> Transform:
        """A deep copy attached to no env, for another env (TorchRL's ``Transform.clone``).

        Settings and statistics are copied; the env this transform is attached to is not
        (the copy binds to the env it is given to).

        Returns:
            The copy (a ``Compose`` copies its transforms).
        """
        # deepcopy puts None where the env was
        memo: dict[int, Any] = {id(t._owner): None for t in _walk(self) if t._owner is not None}
        return copy.deepcopy(self, memo)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in_keys={self.in_keys}, out_keys={self.out_keys})"


class Compose(Transform):
    """Apply transforms in order (actions are inverted in reverse order).

    Examples:
        >>> from rl_envs import InitTracker, StepCounter
        >>> t = Compose(StepCounter(10), InitTracker())
        >>> len(t)
        2
    """

    def __init__(self, *transforms: Transform):
        super().__init__()
        for t in transforms:
            if not isinstance(t, Transform):
                raise TypeError(
                    f"Compose: expected Transform instances, received {type(t).__name__}"
                )
        self.transforms = list(transforms)

    def __len__(self) -> int:
        return len(self.transforms)

    def __getitem__(self, i: int) -> Transform:
        return self.transforms[i]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.transforms)

    def state_dict(self) -> dict[str, Any]:
        """Each transform's state, keyed ``"<position>:<class name>"``."""
        return {f"{i}:{type(t).__name__}": t.state_dict() for i, t in enumerate(self.transforms)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, checking the chain is the one that saved it.

        Raises:
            ValueError: the saved chain's transforms differ (both chains named).
        """
        names = list(self.state_dict())
        if sorted(state) != sorted(names):
            raise ValueError(
                f"Compose.load_state_dict: expected the state of the chain {names}, got "
                f"{sorted(state)}"
            )
        for name, t in zip(names, self.transforms, strict=True):
            t.load_state_dict(state[name])

    def _chain(self, name: str, spec: Composite) -> Composite:
        for t in self.transforms:
            spec = getattr(t, name)(spec)
        return spec

    def transform_observation_spec(self, spec: Composite) -> Composite:
        return self._chain("transform_observation_spec", spec)

    def transform_reward_spec(self, spec: Composite) -> Composite:
        return self._chain("transform_reward_spec", spec)

    def transform_done_spec(self, spec: Composite) -> Composite:
        return self._chain("transform_done_spec", spec)

    def transform_state_spec(self, spec: Composite) -> Composite:
        return self._chain("transform_state_spec", spec)

    def transform_action_spec(self, spec: Composite) -> Composite:
        for t in reversed(self.transforms):
            spec = t.transform_action_spec(spec)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        for t in self.transforms:
            root, next = t.bind(root, next)
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        for t in self.transforms:
            t.on_reset(mask)

    def on_step(self) -> torch.Tensor | None:
        finished = None
        for t in self.transforms:
            m = t.on_step()
            if m is not None:
                finished = m if finished is None else finished | m
        return finished

    def inv_action(self, action: Any) -> Any:
        for t in reversed(self.transforms):
            action = t.inv_action(action)
        return action

    def __repr__(self) -> str:
        return "Compose(" + ", ".join(repr(t) for t in self.transforms) + ")"


class TransformedEnv(EnvBase):
    """An env seen through transforms (specs, resets, steps and inverse actions).

    Args:
        env: the base env.
        transform: a ``Transform`` (or ``Compose``); more can be appended later.

    Examples:
        >>> from rl_envs import GymEnv, RewardSum, StepCounter
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2),
        ...                      Compose(StepCounter(5), RewardSum()))
        >>> data = env.rollout(5, break_when_any_done=False)
        >>> data["next", "step_count"][0, :, 0].tolist()
        [1, 2, 3, 4, 5]
        >>> bool(data["next", "truncated"][:, -1].all())
        True
        >>> env.close()
    """

    def __init__(self, env: EnvBase, transform: Transform | None = None, *, _attach: bool = True):
        if not isinstance(env, EnvBase):
            raise TypeError(
                f"TransformedEnv: env must be an EnvBase, received {type(env).__name__}"
            )
        super().__init__(batch_size=env.batch_size, device=env.device)
        self.base_env = env
        if transform is None:
            transform = Compose()
        elif not isinstance(transform, Compose):
            transform = Compose(transform)
        self.transform = transform
        self._attach = _attach
        self._ext: tuple[TensorDictBase, TensorDictBase] | None = None
        self._ext_pairs: list[tuple[Any, Any]] | None = None
        self._invalidate()

    def _invalidate(self) -> None:
        """Recompute the specs and drop the buffers (rebuilt, and transforms re-bound, on use)."""
        base = self.base_env
        if self._attach:
            for t in self.transform.transforms:
                t._owner = self
        self.observation_spec = self.transform.transform_observation_spec(
            base.observation_spec.clone()
        )
        self.full_reward_spec = self.transform.transform_reward_spec(base.full_reward_spec.clone())
        self.full_done_spec = self.transform.transform_done_spec(base.full_done_spec.clone())
        self.state_spec = self.transform.transform_state_spec(base.state_spec.clone())
        self.full_action_spec = self.transform.transform_action_spec(base.full_action_spec.clone())
        self._root_buf = self._next_buf = None
        self._ext_pairs = None

    def append_transform(self, transform: Transform) -> TransformedEnv:
        self.transform.transforms.append(transform)
        self._invalidate()
        return self

    def insert_transform(self, index: int, transform: Transform) -> TransformedEnv:
        self.transform.transforms.insert(index, transform)
        self._invalidate()
        return self

    def _own_buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        """The transform chain's output buffers (built and bound on first use)."""
        if self._root_buf is None or self._next_buf is None:
            root, nxt = self.base_env.buffers()
            self._root_buf, self._next_buf = self.transform.bind(root, nxt)
            self._ext_pairs = None
        return self._root_buf, self._next_buf

    def buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        own = self._own_buffers()
        if self._ext is None:
            return own
        if self._ext_pairs is None:
            self._ext_pairs = [
                (_np_or_tensor(src.get(k)), _np_or_tensor(dst.get(k)))
                for src, dst in zip(own, self._ext, strict=True)
                for k in src.keys(True, True)
            ]
        return self._ext

    def bind_buffers(self, root: TensorDictBase, next: TensorDictBase) -> None:
        """Write into external buffers (e.g. a batched env's rows): the chain's own buffers
        are copied into them after each fast call (one small copy per key)."""
        self._ext = (root, next)
        self._ext_pairs = None

    def _sync_ext(self) -> tuple[TensorDictBase, TensorDictBase]:
        for src, dst in self._ext_pairs:  # type: ignore[union-attr]
            dst[...] = src
        return self._ext  # type: ignore[return-value]

    @profiled("TransformedEnv._reset")
    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        root, _ = self._own_buffers()
        self.base_env.fast_reset(reset_mask)
        self.transform.on_reset(reset_mask)
        if self._ext is not None:
            self.buffers()
            return self._sync_ext()[0]
        return root

    @profiled("TransformedEnv._step")
    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        if action_needs_check(self, action):
            self.validate_action(action)
        if self._root_buf is None:
            self._own_buffers()
        self.base_env.fast_step(self.transform.inv_action(action))
        finished = self.transform.on_step()
        if finished is not None:
            reset_where(self, finished)
        if self._ext is not None:
            self.buffers()
            root, nxt = self._sync_ext()
            return nxt, root
        return self._next_buf, self._root_buf  # type: ignore[return-value]

    def apply(self, fn: Callable[[Any], Any]) -> TransformedEnv:
        """``fn(x)`` for each transform ``x`` (in order, inside ``Compose`` too), then the base
        env and this env: TorchRL's ``env.apply(fn)`` (``nn.Module.apply``), e.g. to dump
        a ``VideoRecorder``. Returns ``self``."""
        for x in (*_walk(self.transform), self.base_env, self):
            fn(x)
        return self

    def _set_seed(self, seed: int | None) -> None:
        self.base_env.set_seed(seed)

    def state_dict(self) -> dict[str, Any]:
        """The transforms' state (e.g. ``VecNorm`` / ``ObservationNorm`` statistics) and
        the base env's, when it has one; not the simulator's own state."""
        state: dict[str, Any] = {"transform": self.transform.state_dict()}
        if hasattr(self.base_env, "state_dict"):
            state["base_env"] = self.base_env.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the transforms re-bind their buffers)."""
        self.transform.load_state_dict(state["transform"])
        if "base_env" in state:
            self.base_env.load_state_dict(state["base_env"])
        self._invalidate()

    def _close(self) -> None:
        self.base_env.close()

    def __repr__(self) -> str:
        return f"TransformedEnv(env={self.base_env!r}, transform={self.transform!r})"
