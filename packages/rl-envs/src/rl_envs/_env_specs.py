"""TorchRL's spec surface of an env, assembled from ``EnvBase``'s own specs.

``input_spec`` / ``output_spec`` / ``specs`` are new Composites built on each access from
the specs the env holds (``full_action_spec``, ``state_spec``, ``observation_spec``,
``full_reward_spec``, ``full_done_spec``); to change a spec, set that spec.
"""

from __future__ import annotations

from typing import Any

from rl_envs._composite import Composite
from rl_envs._keys import ACTION, DONE, DONE_KEYS, REWARD
from rl_envs._specs import Bounded, TensorSpec

__all__ = ["EnvSpecSurface"]


class _HeldSpec:
    """A spec attribute of an env: set, it is moved to the env's device (:func:`_on_device`)."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, env: Any, owner: type | None = None) -> Any:
        return self if env is None else getattr(env, self.slot)

    def __set__(self, env: Any, spec: Any) -> None:
        setattr(env, self.slot, _on_device(spec, env.device))


class EnvSpecSurface:
    """Mixin of :class:`~rl_envs.EnvBase`: TorchRL's spec properties and key lists.

    Examples:
        >>> from rl_envs import GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=2)
        >>> sorted(env.input_spec.keys()), sorted(env.output_spec.keys())
        (['full_action_spec', 'full_state_spec'], ['full_done_spec', 'full_observation_spec', \
'full_reward_spec'])
        >>> env.observation_keys, env.reward_keys, env.done_key
        (['observation'], ['reward'], 'done')
        >>> env.close()
    """

    batch_size: Any
    device: Any

    # -- the held specs: a spec set on an env lives on the env's device (as TorchRL's
    # setters cast it; a spec written without a device would otherwise leave a CUDA env's
    # buffers, and the policy's first input, on the CPU)
    observation_spec = _HeldSpec("The Composite of every observation key.")
    state_spec = _HeldSpec("The Composite of the extra root inputs (besides the action).")
    full_reward_spec = _HeldSpec("The Composite of every reward key.")
    full_done_spec = _HeldSpec("The Composite of the done keys.")

    # -- spec accessors (TorchRL names) -------------------------------------------------
    @property
    def full_action_spec(self) -> Composite:
        """The Composite of every action key."""
        return self._full_action_spec

    @full_action_spec.setter
    def full_action_spec(self, spec: Composite) -> None:
        if not isinstance(spec, Composite):
            raise TypeError(
                f"full_action_spec: expected a Composite, received {type(spec).__name__}"
            )
        spec = self._full_action_spec = _on_device(spec, self.device)
        keys = spec.keys(True, True)
        self._action_keys = keys
        self._action_leaf = spec[keys[0]] if len(keys) == 1 else None

    @property
    def action_spec(self) -> Any:
        """The action spec: the leaf when there is one action key, else the Composite."""
        return self._action_leaf if self._action_leaf is not None else self._full_action_spec

    @action_spec.setter
    def action_spec(self, spec: Any) -> None:
        if not isinstance(spec, Composite):
            spec = Composite({ACTION: spec}, shape=self.batch_size, device=self.device)
        self.full_action_spec = spec

    @property
    def reward_spec(self) -> TensorSpec:
        return self.full_reward_spec[REWARD]

    @reward_spec.setter
    def reward_spec(self, spec: TensorSpec) -> None:
        self.full_reward_spec = Composite({REWARD: spec}, shape=self.batch_size, device=self.device)

    @property
    def done_spec(self) -> Composite:
        return self.full_done_spec

    @property
    def action_keys(self) -> list[Any]:
        return list(self._action_keys)

    @property
    def action_key(self) -> Any:
        return self._action_keys[0]

    @property
    def reward_key(self) -> str:
        return REWARD

    @property
    def done_keys(self) -> list[str]:
        return list(DONE_KEYS)

    @property
    def full_observation_spec(self) -> Composite:
        """The Composite of every observation key (TorchRL's name of ``observation_spec``)."""
        return self.observation_spec

    @full_observation_spec.setter
    def full_observation_spec(self, spec: Composite) -> None:
        self.observation_spec = spec

    @property
    def full_state_spec(self) -> Composite:
        """The Composite of the extra root inputs (TorchRL's name of ``state_spec``)."""
        return self.state_spec

    @full_state_spec.setter
    def full_state_spec(self, spec: Composite) -> None:
        self.state_spec = spec

    def _compose(self, **parts: Composite) -> Composite:
        batch = self.batch_size  # type: ignore[attr-defined]
        return Composite(dict(parts), shape=batch, device=self.device)  # type: ignore[attr-defined]

    @property
    def input_spec(self) -> Composite:
        """``full_action_spec`` and ``full_state_spec``: what the env reads."""
        return self._compose(full_action_spec=self.full_action_spec,
                             full_state_spec=self.state_spec)

    @property
    def output_spec(self) -> Composite:
        """``full_observation_spec``, ``full_reward_spec`` and ``full_done_spec``."""
        return self._compose(full_observation_spec=self.observation_spec,
                             full_reward_spec=self.full_reward_spec,
                             full_done_spec=self.full_done_spec)

    @property
    def specs(self) -> Composite:
        """``output_spec`` and ``input_spec`` together."""
        return self._compose(output_spec=self.output_spec, input_spec=self.input_spec)

    @property
    def full_action_spec_unbatched(self) -> Composite:
        """``full_action_spec`` without the env's batch dims (TorchRL's name)."""
        return unbatched(self.full_action_spec, len(self.batch_size))  # type: ignore[attr-defined]

    @property
    def action_spec_unbatched(self) -> Any:
        """``action_spec`` without the env's batch dims: one sub-env's action space."""
        return unbatched(self.action_spec, len(self.batch_size))  # type: ignore[attr-defined]

    @property
    def full_observation_spec_unbatched(self) -> Composite:
        """``full_observation_spec`` without the env's batch dims."""
        return unbatched(self.observation_spec, len(self.batch_size))  # type: ignore[attr-defined]

    @property
    def observation_spec_unbatched(self) -> Composite:
        """``observation_spec`` without the env's batch dims."""
        return self.full_observation_spec_unbatched

    @property
    def full_reward_spec_unbatched(self) -> Composite:
        """``full_reward_spec`` without the env's batch dims."""
        return unbatched(self.full_reward_spec, len(self.batch_size))  # type: ignore[attr-defined]

    @property
    def full_done_spec_unbatched(self) -> Composite:
        """``full_done_spec`` without the env's batch dims."""
        return unbatched(self.full_done_spec, len(self.batch_size))  # type: ignore[attr-defined]

    @property
    def observation_keys(self) -> list[Any]:
        """Every observation key (nested keys as tuples)."""
        return self.observation_spec.keys(True, True)

    @property
    def state_keys(self) -> list[Any]:
        """Every state key (extra root inputs)."""
        return self.state_spec.keys(True, True)

    @property
    def reward_keys(self) -> list[Any]:
        """Every reward key."""
        return self.full_reward_spec.keys(True, True)

    @property
    def done_key(self) -> str:
        """The main done key (``"done"``)."""
        return DONE

    @property
    def batch_locked(self) -> bool:
        """Always True here: an env steps exactly its ``batch_size``."""
        return True


def unbatched(spec: Any, dims: int) -> Any:
    """``spec`` without its ``dims`` leading (batch) dims: a copy, bounds of the first row.

    Examples:
        >>> import torch
        >>> spec = Bounded(torch.zeros(4, 2), torch.ones(4, 2), shape=(4, 2))
        >>> unbatched(spec, 1).shape, unbatched(spec, 1).space.low
        (torch.Size([2]), tensor([0., 0.]))
        >>> unbatched(Composite({"obs": spec}, shape=(4,)), 1)["obs"].shape
        torch.Size([2])
    """
    if dims == 0:
        return spec.clone()
    if isinstance(spec, Composite):
        parts = {k: unbatched(spec[k], dims) for k in spec}
        return Composite(parts, shape=spec.shape[dims:], device=spec.device)
    first = (0,) * dims
    if isinstance(spec, Bounded):
        return Bounded(spec.low[first], spec.high[first], shape=spec.shape[dims:],
                       device=spec.device, dtype=spec.dtype)
    return spec._rebuild(spec.shape[dims:])


def _on_device(spec: Any, device: Any) -> Any:
    """``spec`` itself when every leaf is on ``device`` (or the env has none), else a copy
    moved there."""
    if device is None or not isinstance(spec, Composite):
        return spec
    leaves = spec.values(True, True)
    if all(getattr(leaf, "device", device) == device for leaf in leaves):
        return spec
    return spec.to(device)
