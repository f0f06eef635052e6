"""Base class of the estimator modules: keys, running the critic, reading the inputs."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from rl_profiling import profiled_methods
from rl_profiling.layout import TIME
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from rl_objectives import _keys
from rl_objectives._tensor_keys import KeyedModule, StepKeys, get_key
from rl_objectives.value._checks import check_time_dim

__all__ = ["ValueEstimatorBase", "marked_time_dim"]


def marked_time_dim(tensordict: TensorDictBase) -> int:
    """The batch dim of ``tensordict`` named ``"time"``, else its last batch dim.

    TorchRL's rule: a rollout or a collector's batch names its time dim ``"time"``, so an
    estimator finds it wherever the batch put it; a TensorDict built by hand, with no
    names, has time last (``[*B, T]``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"r": torch.zeros(5, 2)}, [5, 2])
        >>> marked_time_dim(td), marked_time_dim(td.refine_names("time", None))
        (1, 0)
    """
    names = tensordict.names
    return names.index(TIME) if TIME in names else tensordict.batch_dims - 1


_KEYS = "set them with .set_keys(advantage=..., value_target=..., value=...)"
TORCHRL_ONLY = {
    "vectorized": "the estimators always run one vectorised computation over time (no per-step "
                  "loop to choose)",
    "advantage_key": _KEYS,
    "value_target_key": _KEYS,
    "value_key": _KEYS,
}
"""TorchRL value-estimator arguments with no counterpart here, and what to do instead."""


class ValueEstimatorBase(KeyedModule, nn.Module):
    """Reads a ``[*B, T]`` rollout and writes ``advantage`` and ``value_target``.

    Subclasses implement :meth:`_estimate`, mapping the input tensors (time at
    ``time_dim``) to ``(advantage, value_target)``.

    Args:
        gamma: discount, float or tensor.
        value_network: critic writing ``state_value`` from the root and from ``"next"``;
            ``None`` when the input already holds both values.
        differentiable: keep the graph through the critic (targets are detached
            otherwise).
        skip_existing: do not re-run the critic where ``state_value`` is present.
        time_dim: the batch dim of the TensorDict that is time. When ``None``, the dim
            named ``"time"`` (TorchRL's mark, which ``EnvBase.rollout`` and the
            collectors put on their batches: :func:`marked_time_dim`), else the last one.
        shifted: TorchRL's option, exact here: run the critic on the root only, and on
            ``"next"`` only where the next step's inputs are not the following root row's
            (the last step, and the steps after which a sub-env was reset); every other
            ``V(s_{t+1})`` is the following row's ``V(s_t)``. About half the critic's work
            on rollouts; for critics that map each step on its own (not a recurrent
            critic run over the time dim). ``"next"`` then gets only the value key, not
            the critic's other outputs. With ``skip_existing`` and root values already
            in the input (a collector that ran the actor-critic), the critic runs only on
            those other ``"next"`` rows: the last step and the resets.

    Raises:
        TypeError: ``value_network`` is not a TensorDict module, or ``shifted`` is not a
            bool.
        ValueError: ``gamma`` is not a float or a tensor.
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """An estimator's key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            advantage: where the advantage is written.
            value_target: where the value target is written.
            value: the state value ``V(s_t)`` (and ``V(s_{t+1})`` under ``"next"``).
            sample_log_prob: the behaviour policy's log-probability (V-trace).
        """

        advantage: NestedKey = _keys.ADVANTAGE
        value_target: NestedKey = _keys.VALUE_TARGET
        value: NestedKey = _keys.STATE_VALUE
        sample_log_prob: NestedKey = _keys.SAMPLE_LOG_PROB

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        profiled_methods(cls, "forward", "value_estimate")  # "GAE.forward", ...

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        value_network: TensorDictModuleBase | None = None,
        differentiable: bool = False,
        skip_existing: bool = False,
        time_dim: int | None = None,
        shifted: bool = False,
        **torchrl_only: Any,
    ) -> None:
        super().__init__()
        # a TorchRL argument names what to use instead; any other is a typo
        for name in torchrl_only:
            reason = TORCHRL_ONLY.get(name)
            raise TypeError(
                f"{name}: TorchRL's argument is not supported here; {reason}" if reason
                else f"{type(self).__name__}: got an unexpected keyword argument {name!r}"
            )
        if not isinstance(gamma, (float, int, torch.Tensor)) or isinstance(gamma, bool):
            raise ValueError(f"gamma must be a float or a tensor, got {type(gamma).__name__}")
        if value_network is not None and not isinstance(value_network, TensorDictModuleBase):
            raise TypeError(
                "value_network must be a tensordict.nn module (in_keys/out_keys), got "
                f"{type(value_network).__name__}"
            )
        if not isinstance(shifted, bool):
            raise TypeError(f"shifted: expected a bool, received {shifted!r}")
        self.gamma = float(gamma) if not isinstance(gamma, torch.Tensor) else gamma
        self.value_network = value_network
        self.shifted = shifted
        self.differentiable = differentiable
        self.skip_existing = skip_existing
        self.time_dim = time_dim
        self._init_keys()

    def _run_critic(self, tensordict: TensorDictBase) -> None:
        key = self.tensor_keys.value
        with torch.set_grad_enabled(self.differentiable and torch.is_grad_enabled()):
            subs = (tensordict, tensordict.get(_keys.NEXT))
            todo = [not (self.skip_existing and key in sub.keys(include_nested=True))
                    for sub in subs]
            if self.shifted and todo[1]:  # root values: the critic's, or the collector's
                if todo[0]:
                    self.value_network(tensordict)
                self._shifted_next_values(tensordict)
                return
            for sub, run in zip(subs, todo, strict=True):
                if run:
                    self.value_network(sub)

    def _shifted_next_values(self, tensordict: TensorDictBase) -> None:
        """``("next", value)`` from the root values where the next inputs are the
        following root row's; the critic runs on the other rows only."""
        key, nxt = self.tensor_keys.value, tensordict.get(_keys.NEXT)
        time_dim, dims = self._time_dim(tensordict), tensordict.batch_dims
        steps = tensordict.batch_size[time_dim]
        value = tensordict.get(key)
        same = torch.ones(tensordict.batch_size, dtype=torch.bool, device=value.device)
        same.narrow(time_dim, steps - 1, 1).fill_(False)  # the last step has no following row
        for in_key in self.value_network.in_keys:
            ahead = nxt.get(in_key, None)
            if ahead is None:  # an input the critic finds only at the root: no shift to use
                self.value_network(nxt)
                return
            equal = ahead.narrow(time_dim, 0, steps - 1) == tensordict.get(in_key).narrow(
                time_dim, 1, steps - 1)
            if equal.ndim > dims:  # every element of the step's input
                equal = equal.flatten(dims).all(-1)
            same.narrow(time_dim, 0, steps - 1).logical_and_(equal.to(same.device))
        # a new tensor: the following row's value, the last step's a placeholder
        next_value = torch.cat([value.narrow(time_dim, 1, steps - 1),
                                value.narrow(time_dim, steps - 1, 1)], dim=time_dim)
        rest = ~same
        computed = self.value_network(nxt.select(*self.value_network.in_keys)[rest]).get(key)
        next_value[rest] = computed.to(next_value.dtype)
        nxt.set(key, next_value)

    def _inputs(self, tensordict: TensorDictBase) -> dict[str, torch.Tensor]:
        owner = type(self).__name__
        keys = self.tensor_keys
        nxt = get_key(tensordict, _keys.NEXT, owner)
        done = get_key(nxt, keys.done, owner)
        terminated = nxt.get(keys.terminated, None)
        inputs = {
            "state_value": get_key(tensordict, keys.value, owner),
            "next_state_value": get_key(nxt, keys.value, owner),
            "reward": get_key(nxt, keys.reward, owner),
            "done": done,
            "terminated": done if terminated is None else terminated,
        }
        if not self.differentiable:
            inputs = {k: v.detach() for k, v in inputs.items()}
        return inputs

    def _time_dim(self, tensordict: TensorDictBase) -> int:
        if tensordict.batch_dims == 0:
            raise ValueError(
                f"{type(self).__name__} needs a TensorDict with a time batch dim, "
                f"got batch_size={tuple(tensordict.batch_size)}"
            )
        if self.time_dim is None:
            return marked_time_dim(tensordict)
        return check_time_dim(self.time_dim, tensordict.batch_dims)

    def _estimate(self, inputs: dict[str, torch.Tensor], time_dim: int):
        raise NotImplementedError

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Write ``advantage`` and ``value_target`` into ``tensordict`` and return it.

        Args:
            tensordict: a ``[*B, T]`` rollout.

        Returns:
            The same TensorDict, with the two keys set.

        Raises:
            MissingKeyError: a key the estimator reads is absent.
        """
        if self.value_network is not None:
            self._run_critic(tensordict)
        time_dim = self._time_dim(tensordict)
        advantage, value_target = self._estimate(self._inputs(tensordict), time_dim)
        tensordict.set(self.tensor_keys.advantage, advantage)
        tensordict.set(self.tensor_keys.value_target, value_target)
        return tensordict

    def value_estimate(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Return the value target of ``tensordict`` (without writing anything).

        Args:
            tensordict: a ``[*B, T]`` rollout.

        Returns:
            The value target tensor.
        """
        if self.value_network is not None:
            self._run_critic(tensordict)
        return self._estimate(self._inputs(tensordict), self._time_dim(tensordict))[1]
