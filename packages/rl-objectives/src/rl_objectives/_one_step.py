"""Pieces shared by the one-step off-policy losses (TD3, DDPG, discrete SAC, C51, CrossQ,
REDQ): reading ``r_t`` and ``m_t`` (terminated) from ``"next"``, the reduction, the
TD(0)-only ``make_value_estimator`` and the deterministic actor's call."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rl_objectives import _keys
from rl_objectives._loss_base import ValueEstimators

__all__ = [
    "LossAndMetadata",
    "OneStepTarget",
    "apply_torchrl_options",
    "act",
    "check_module",
    "check_reduction",
    "not_a_part",
    "reduce",
    "reward_terminated",
]

_REDUCTIONS = ("mean", "sum", "none")

#: What TorchRL's per-part loss methods (``actor_loss``, ``qvalue_loss``, ...) return: the
#: loss term and a dict of detached diagnostics.
LossAndMetadata = tuple[torch.Tensor, dict[str, torch.Tensor]]


def check_reduction(reduction: str | None) -> str:
    """``None`` means ``"mean"``; anything else outside ``mean|sum|none`` is an error."""
    reduction = "mean" if reduction is None else reduction
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS} or None, got {reduction!r}")
    return reduction


def reduce(value: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mean, sum, or the element-wise value (``"none"``)."""
    if reduction == "mean":
        return value.mean()
    return value.sum() if reduction == "sum" else value


def reward_terminated(loss: Any, tensordict: TensorDictBase) -> tuple[torch.Tensor, ...]:
    """``(next TensorDict, r_t, m_t)``, both ``[*B]``; ``m_t`` is ``done`` if no terminated."""
    keys = loss.tensor_keys
    nxt = loss._get(tensordict, _keys.NEXT)
    reward = loss._get(nxt, keys.reward)
    terminated = nxt.get(keys.terminated, None)
    terminated = loss._get(nxt, keys.done) if terminated is None else terminated
    batch = tensordict.batch_size
    return nxt, reward.reshape(batch), terminated.reshape(batch)


def act(actor: TensorDictModuleBase, tensordict: TensorDictBase) -> TensorDictBase:
    """Run a deterministic actor on a shallow copy of ``tensordict`` (its keys only)."""
    return actor(tensordict.select(*actor.in_keys, strict=False))


def check_module(name: str, net: Any, *, probabilistic: bool = False) -> None:
    """A tensordict module (with ``get_dist`` if ``probabilistic``), or a ``TypeError``."""
    if not isinstance(net, TensorDictModuleBase):
        raise TypeError(f"{name} must be a tensordict.nn module, got {type(net).__name__}")
    if probabilistic and not hasattr(net, "get_dist"):
        raise TypeError(
            f"{name} must be probabilistic (have get_dist(tensordict), e.g. a "
            f"ProbabilisticTensorDictSequential), got {type(net).__name__}"
        )


def not_a_part(name: str) -> Any:
    """A method ``name`` that refuses: SACLoss's per-part methods on a subclass whose terms
    differ (REDQ, CQL), where inheriting them would silently compute SAC's terms."""

    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        owner = type(self).__name__
        raise NotImplementedError(
            f"{owner}.{name}: SACLoss's per-part method does not compute {owner}'s terms "
            "(TorchRL's has no counterpart here); call the loss and use its loss_* entries"
        )

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__doc__ = f"Not available on this loss (raises ``NotImplementedError``): ``{name}``."
    return refuse


def apply_torchrl_options(loss: Any, options: dict[str, Any],
                          refused: tuple[str, ...] = ()) -> None:
    """TorchRL keywords kept out of a long signature: ``priority_key`` renames the priority
    key (``set_keys(priority=...)``), ``separate_losses`` is accepted (the terms here never
    share gradients), a name in ``refused`` raises when true; anything else is a TypeError.

    Raises:
        ValueError: a refused option set to true.
        TypeError: an unknown keyword.
    """
    name = type(loss).__name__
    for key, value in options.items():
        if key == "priority_key":
            if value is not None:
                loss.set_keys(priority=value)
        elif key in refused:
            if value:
                raise ValueError(f"{name}: {key}=True is not supported, got {value!r}")
        elif key != "separate_losses":
            raise TypeError(f"{name}: got an unexpected keyword argument {key!r}")


class OneStepTarget:
    """Mixin: ``make_value_estimator`` that sets ``gamma`` of the one-step target (TD(0))."""

    gamma: float

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> Any:
        """Set the discount of the one-step (TD(0)) target, TorchRL style.

        Args:
            value_type: ``None`` or TD(0); these targets are one-step only.
            **hyperparams: ``gamma``; TorchRL's ``device`` is accepted (the target is
                computed where the batch lives).

        Returns:
            ``self``.

        Raises:
            NotImplementedError: another estimator than TD(0).
            ValueError: an unknown hyper-parameter.
        """
        name = type(self).__name__
        if value_type not in (None, ValueEstimators.TD0, "TD0", ValueEstimators.TD0.value):
            raise NotImplementedError(
                f"{name} builds one-step targets only (TD(0)), got {value_type!r}"
            )
        if set(hyperparams) - {"gamma", "device"}:  # device: TorchRL's, the target's own
            raise ValueError(f"{name} takes only gamma (and device), got {sorted(hyperparams)}")
        self.gamma = float(hyperparams.get("gamma", self.gamma))
        return self
