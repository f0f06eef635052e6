"""Exploration modules (TorchRL names and meaning): ``EGreedyModule``,
``AdditiveGaussianModule`` and ``OrnsteinUhlenbeckProcessModule``.

Each goes after a policy in a ``TensorDictSequential`` and rewrites its ``action``. They act
only while the exploration type is ``RANDOM`` (a collector's default) or unset, and are
inert under ``set_exploration_type(ExplorationType.DETERMINISTIC)`` (or ``MODE`` /
``MEAN``), so one policy serves collection and evaluation. Their annealed scale (``eps``,
``sigma``) is a buffer: the learner calls ``step(frames)`` and the collectors' weight sync
carries it to the workers.
"""

from __future__ import annotations

from typing import Any

import torch
from rl_envs import Composite
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    TensorDictModuleBase,
    interaction_type,
    set_interaction_type,
)

from rl_modules._spec_guard import event_spec

__all__ = [
    "AdditiveGaussianModule",
    "EGreedyModule",
    "ExplorationType",
    "OrnsteinUhlenbeckProcessModule",
    "exploration_type",
    "set_exploration_type",
]

ExplorationType = InteractionType
"""TorchRL's name of ``tensordict.nn.InteractionType`` (``RANDOM``, ``DETERMINISTIC``, ...)."""
set_exploration_type = set_interaction_type
"""TorchRL's name of ``tensordict.nn.set_interaction_type`` (a context manager/decorator)."""
exploration_type = interaction_type
"""TorchRL's name of ``tensordict.nn.interaction_type()``: the current type, or ``None``."""


def _exploring() -> bool:
    kind = interaction_type()
    return kind is None or kind is InteractionType.RANDOM


def _leaf(spec: Any, key: Any) -> Any:
    if isinstance(spec, Composite):
        if key not in spec:
            raise KeyError(f"spec: the Composite spec has no {key!r} entry; keys: {spec.keys()}")
        spec = spec[key]
    return event_spec(spec)


class _Annealed(TensorDictModuleBase):
    """Rewrites ``action_key`` within ``spec``, by a scale annealed linearly from ``init``
    to ``end`` over ``annealing_num_steps`` frames and held in the buffer ``name`` (synced
    to workers with the weights)."""

    def __init__(
        self,
        name: str,
        init: float,
        end: float,
        annealing_num_steps: int,
        spec: Any,
        action_key: Any,
    ) -> None:
        super().__init__()
        self.spec = _leaf(spec, action_key)
        self.action_key = action_key
        if annealing_num_steps <= 0:
            raise ValueError(
                f"annealing_num_steps: expected a positive int, received {annealing_num_steps}"
            )
        self._scale_name = name
        self.register_buffer(f"{name}_init", torch.tensor(float(init)))
        self.register_buffer(f"{name}_end", torch.tensor(float(end)))
        self.register_buffer(name, torch.tensor(float(init)))
        self.annealing_num_steps = int(annealing_num_steps)
        self.frames = 0

    def step(self, frames: int = 1) -> None:
        """Advance the annealing by ``frames`` collected frames (call once per batch with
        ``batch.numel()``)."""
        self.frames += int(frames)
        init = getattr(self, f"{self._scale_name}_init")
        end = getattr(self, f"{self._scale_name}_end")
        frac = min(self.frames / self.annealing_num_steps, 1.0)
        getattr(self, self._scale_name).copy_(init + (end - init) * frac)

    def _spec_on(self, device: torch.device) -> Any:
        """The action spec on ``device`` (moved once, when the module moved)."""
        if self.spec.device != device:
            self.spec = self.spec.to(device)
        return self.spec


class EGreedyModule(_Annealed):
    """With probability ``eps``, replace each sub-env's action by a uniform random one.

    ``eps`` anneals linearly from ``eps_init`` to ``eps_end`` over ``annealing_num_steps``
    frames of ``step``. Each batch element draws on its own; random actions come from the
    action spec (index or one-hot), among the allowed ones when ``action_mask_key`` is set.

    Args:
        spec: the action spec (``Categorical``, ``OneHot``, ``Bounded``, ...; batched or not).
        eps_init: epsilon at the start.
        eps_end: epsilon after ``annealing_num_steps`` frames.
        annealing_num_steps: frames over which epsilon anneals.
        action_key: the key of the action to rewrite.
        action_mask_key: a bool key of allowed actions (discrete specs), or ``None``.
        device: where the module's state (``eps``) lives, as TorchRL's ``device=``.

    Examples:
        >>> import torch
        >>> from rl_envs import Categorical
        >>> from tensordict import TensorDict
        >>> explore = EGreedyModule(Categorical(4), eps_init=1.0, eps_end=0.1,
        ...                         annealing_num_steps=100)
        >>> explore.step(50); round(float(explore.eps), 3)
        0.55
        >>> td = TensorDict(action=torch.zeros(1000, dtype=torch.long), batch_size=[1000])
        >>> with set_exploration_type(ExplorationType.DETERMINISTIC):
        ...     bool((explore(td.clone())["action"] == 0).all())
        True
    """

    def __init__(
        self,
        spec: Any,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        *,
        action_key: Any = "action",
        action_mask_key: Any = None,
        device: Any = None,
    ) -> None:
        super().__init__("eps", eps_init, eps_end, annealing_num_steps, spec, action_key)
        if device is not None:
            self.to(device)
        self.action_mask_key = action_mask_key
        self.in_keys = [action_key] + ([action_mask_key] if action_mask_key is not None else [])
        self.out_keys = [action_key]

    def _random(self, action: torch.Tensor, td: TensorDictBase) -> torch.Tensor:
        batch = action.shape[: action.ndim - len(self.spec.shape)]
        if self.action_mask_key is None:
            return self._spec_on(action.device).rand(batch)
        mask = td.get(self.action_mask_key)
        index = torch.multinomial(mask.reshape(-1, mask.shape[-1]).float(), 1).reshape(
            mask.shape[:-1]
        )
        if action.shape == mask.shape:  # one-hot actions
            return torch.nn.functional.one_hot(index, mask.shape[-1]).to(action.dtype)
        return index.to(action.dtype)

    @profiled("EGreedyModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        batch = action.shape[: action.ndim - len(self.spec.shape)]
        explore = torch.rand(batch, device=action.device) < self.eps
        explore = explore.reshape((*batch, *([1] * len(self.spec.shape))))  # () for one action
        tensordict.set(
            self.action_key, torch.where(explore, self._random(action, tensordict), action)
        )
        return tensordict


class AdditiveGaussianModule(_Annealed):
    """Add ``sigma * N(mean, std)`` noise to a continuous action, then project it into
    the spec (DDPG/TD3 exploration).

    ``sigma`` anneals linearly from ``sigma_init`` to ``sigma_end`` over
    ``annealing_num_steps`` frames of ``step``.

    Args:
        spec: the action spec (``Bounded`` usually; batched or not).
        sigma_init: noise scale at the start.
        sigma_end: noise scale after annealing.
        annealing_num_steps: frames over which sigma anneals.
        mean: mean of the noise.
        std: standard deviation of the noise before scaling.
        action_key: the key of the action.
        safe: project the noisy action into the spec.
        device: where the module's state (``sigma``) lives, as TorchRL's ``device=``.

    Examples:
        >>> import torch
        >>> from rl_envs import Bounded
        >>> from tensordict import TensorDict
        >>> noise = AdditiveGaussianModule(Bounded(-1.0, 1.0, shape=(2,)), sigma_init=5.0)
        >>> td = noise(TensorDict(action=torch.zeros(64, 2), batch_size=[64]))
        >>> bool((td["action"].abs() <= 1).all()), bool((td["action"] != 0).any())
        (True, True)
    """

    def __init__(
        self,
        spec: Any,
        sigma_init: float = 1.0,
        sigma_end: float = 0.1,
        annealing_num_steps: int = 1000,
        mean: float = 0.0,
        std: float = 1.0,
        *,
        action_key: Any = "action",
        safe: bool = True,
        device: Any = None,
    ) -> None:
        super().__init__("sigma", sigma_init, sigma_end, annealing_num_steps, spec, action_key)
        if device is not None:
            self.to(device)
        self.mean, self.std, self.safe = float(mean), float(std), safe
        self.in_keys = self.out_keys = [action_key]

    @profiled("AdditiveGaussianModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        noise = torch.randn_like(action)
        if self.std != 1.0 or self.mean != 0.0:  # N(0, 1) draws as they are: two ops fewer
            noise.mul_(self.std).add_(self.mean)
        noise.mul_(self.sigma)
        out = action + noise
        tensordict.set(
            self.action_key, self._spec_on(out.device).project(out) if self.safe else out
        )
        return tensordict


class OrnsteinUhlenbeckProcessModule(_Annealed):
    """Add temporally correlated Ornstein-Uhlenbeck noise to a continuous action (DDPG).

    ``x_{t+1} = x_t + theta (mu - x_t) dt + sigma sqrt(dt) N(0, 1)``, one process per
    batch element (sub-env), restarted at ``x0`` where ``is_init`` is set (the env's
    ``InitTracker``), so one sub-env's reset does not touch the others' noise. The noise
    is scaled by ``eps``, annealed from ``eps_init`` to ``eps_end`` by ``step(frames)``.
    The process state lives in the module (not in the weights that get synced) and is
    rebuilt when the batch shape changes.

    Args:
        spec: the action spec (batched or not).
        eps_init: noise scale at the start.
        eps_end: noise scale after annealing.
        annealing_num_steps: frames over which the scale anneals.
        theta: mean reversion rate.
        mu: long-run mean.
        sigma: volatility.
        dt: time step.
        x0: the state at a (re)start.
        action_key: the key of the action.
        is_init_key: the key marking a sub-env's first step.
        safe: project the noisy action into the spec.

    Raises:
        KeyError: the input has no ``is_init_key`` (add ``InitTracker()`` to the env).

    Examples:
        >>> import torch
        >>> from rl_envs import Bounded
        >>> from tensordict import TensorDict
        >>> ou = OrnsteinUhlenbeckProcessModule(Bounded(-1.0, 1.0, shape=(2,)))
        >>> td = TensorDict(action=torch.zeros(3, 2), is_init=torch.ones(3, 1, dtype=torch.bool),
        ...                 batch_size=[3])
        >>> ou(td)["action"].shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        spec: Any,
        eps_init: float = 1.0,
        eps_end: float = 0.1,
        annealing_num_steps: int = 1000,
        theta: float = 0.15,
        mu: float = 0.0,
        sigma: float = 0.2,
        dt: float = 1e-2,
        x0: float = 0.0,
        *,
        action_key: Any = "action",
        is_init_key: Any = "is_init",
        safe: bool = True,
    ) -> None:
        super().__init__("eps", eps_init, eps_end, annealing_num_steps, spec, action_key)
        self.theta, self.mu, self.sigma, self.dt, self.x0 = theta, mu, sigma, dt, x0
        self.is_init_key, self.safe = is_init_key, safe
        self.in_keys = [action_key, is_init_key]
        self.out_keys = [action_key]
        self.noise: torch.Tensor | None = None  # [*B, *action]: not a buffer (not synced)

    def _restart(self, action: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        if (
            self.noise is None
            or self.noise.shape != action.shape
            or self.noise.device != action.device
        ):
            self.noise = torch.full_like(action, self.x0)
            return self.noise
        rows = is_init.reshape(
            *is_init.shape[: action.ndim - len(self.spec.shape)], *([1] * len(self.spec.shape))
        )
        return self.noise.masked_fill_(rows, self.x0)

    @profiled("OrnsteinUhlenbeckProcessModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if not _exploring():
            return tensordict
        action = tensordict.get(self.action_key)
        is_init = tensordict.get(self.is_init_key, None)
        if is_init is None:
            raise KeyError(
                f"OrnsteinUhlenbeckProcessModule: the input has no {self.is_init_key!r} key, "
                f"needed to restart each sub-env's noise; add InitTracker() to the env"
            )
        x = self._restart(action, is_init)
        x.add_(
            self.theta * (self.mu - x) * self.dt + self.sigma * self.dt**0.5 * torch.randn_like(x)
        )
        out = action + self.eps * x
        tensordict.set(
            self.action_key, self._spec_on(out.device).project(out) if self.safe else out
        )
        return tensordict
