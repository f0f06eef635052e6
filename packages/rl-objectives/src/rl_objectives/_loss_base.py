"""``LossModule``: the base of every loss (keys, value estimator, target networks)."""

from __future__ import annotations

import copy
import enum
from typing import Any

import torch
from rl_profiling import profiled_methods
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl_objectives._tensor_keys import KeyedModule, get_key
from rl_objectives.value import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator

__all__ = ["LossModule", "ValueEstimators", "distance_loss"]


class ValueEstimators(enum.Enum):
    """Names of the value estimators a loss can build with ``make_value_estimator``."""

    TD0 = "TD(0)"
    TD1 = "TD(1)"
    TDLambda = "TD(lambda)"
    GAE = "GAE"


#: TorchRL's public per-part loss methods; each gets a range ``"<Loss>.<method>"``.
_PART_METHODS = ("actor_loss", "qvalue_loss", "qvalue_v2_loss", "value_loss", "alpha_loss",
                 "loss_actor", "loss_value")

_ESTIMATORS = {
    ValueEstimators.TD0: TD0Estimator,
    ValueEstimators.TD1: TD1Estimator,
    ValueEstimators.TDLambda: TDLambdaEstimator,
    ValueEstimators.GAE: GAE,
}


def distance_loss(prediction: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """Element-wise ``l1``, ``l2`` (squared error) or ``smooth_l1`` distance.

    Args:
        prediction: the prediction.
        target: the target, same shape.
        kind: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.

    Returns:
        The element-wise loss.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind == "l2":
        return (prediction - target).pow(2)
    if kind == "l1":
        return (prediction - target).abs()
    if kind == "smooth_l1":
        return nn.functional.smooth_l1_loss(prediction, target, reduction="none")
    raise ValueError(f"loss function must be 'l1', 'l2' or 'smooth_l1', got {kind!r}")


class LossModule(KeyedModule, nn.Module):
    """Base of the losses: ``forward(tensordict) -> TensorDict`` of ``loss_*`` entries.

    Subclasses declare an ``_AcceptedKeys`` dataclass (renamed with ``set_keys``) and
    register target networks with :meth:`_make_target`, which :class:`SoftUpdate` and
    :class:`HardUpdate` then track.
    """

    default_value_estimator: ValueEstimators = ValueEstimators.TD0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # a range named after each loss: "ClipPPOLoss.forward", "TD3Loss.actor_loss", ...
        profiled_methods(cls, "forward", *_PART_METHODS)

    def __init__(self) -> None:
        super().__init__()
        self._init_keys()
        self._target_pairs: list[tuple[str, str]] = []
        self._value_estimator: nn.Module | None = None

    def _make_target(self, name: str, online: nn.Module) -> nn.Module:
        """Register ``target_<name>``, a frozen deep copy of ``online`` (lazy parameters
        not yet initialised stay lazy: the target updaters materialise them)."""
        target = copy.deepcopy(online)
        for p in target.parameters():
            p.requires_grad = False  # the attribute, not requires_grad_(): lazy ones too
        setattr(self, f"target_{name}", target)
        self._target_pairs.append((name, f"target_{name}"))
        return target

    def target_pairs(self) -> list[tuple[list[nn.Parameter], list[nn.Parameter]]]:
        """``(online parameters, target parameters)`` for every target network."""
        return [
            (list(getattr(self, online).parameters()), list(getattr(self, target).parameters()))
            for online, target in self._target_pairs
        ]

    def _get(self, tensordict: TensorDictBase, key) -> torch.Tensor:
        return get_key(tensordict, key, type(self).__name__)

    def make_value_estimator(
        self, value_type: ValueEstimators | str | None = None, **hyperparams: Any
    ) -> LossModule:
        """Build the estimator this loss runs when its input lacks an advantage.

        Args:
            value_type: a :class:`ValueEstimators` member or its name; the loss's
                default when ``None``.
            **hyperparams: estimator arguments (``gamma``, ``lmbda``, ...).

        Returns:
            ``self``.

        Raises:
            ValueError: an unknown ``value_type``.
        """
        if value_type is None:
            value_type = self.default_value_estimator
        if isinstance(value_type, str):
            by_name = {v.name: v for v in ValueEstimators} | {v.value: v for v in ValueEstimators}
            if value_type not in by_name:
                raise ValueError(
                    f"value_type must be one of {sorted(by_name)}, got {value_type!r}"
                )
            value_type = by_name[value_type]
        hyperparams.setdefault("gamma", getattr(self, "gamma", None) or 0.99)
        if value_type in (ValueEstimators.GAE, ValueEstimators.TDLambda):
            hyperparams.setdefault("lmbda", 0.95)
        self._value_estimator = _ESTIMATORS[value_type](**hyperparams)
        self._sync_estimator_keys()
        return self

    def _sync_estimator_keys(self) -> None:
        est = self._value_estimator
        if est is None:
            return
        shared = {f for f in vars(est.tensor_keys) if hasattr(self.tensor_keys, f)}
        est.set_keys(**{f: getattr(self.tensor_keys, f) for f in shared})

    def set_keys(self, **keys: Any) -> LossModule:
        """Rename keys (see ``tensor_keys``); the value estimator follows.

        Args:
            **keys: role name to key.

        Returns:
            ``self``.
        """
        super().set_keys(**keys)
        self._sync_estimator_keys()
        return self

    def _network_params(self, name: str) -> TensorDictBase:
        net = self._modules.get(name)
        if net is None:
            raise AttributeError(f"{type(self).__name__} has no {name}, so no {name}_params")
        return TensorDict.from_module(net)

    @property
    def actor_network_params(self) -> TensorDictBase:
        """TorchRL's name: the actor's parameters and buffers as a TensorDict of the
        module's own tensors (``.flatten_keys().values()`` feeds an optimiser)."""
        return self._network_params("actor_network")

    @property
    def value_network_params(self) -> TensorDictBase:
        """TorchRL's name: the value network's parameters and buffers (see
        :attr:`actor_network_params`)."""
        return self._network_params("value_network")

    @property
    def critic_network_params(self) -> TensorDictBase:
        """TorchRL's name: the critic's parameters and buffers (see
        :attr:`actor_network_params`)."""
        return self._network_params("critic_network")

    @property
    def value_estimator(self) -> nn.Module:
        """The estimator used when the input has no advantage (built on first use)."""
        if self._value_estimator is None:
            self.make_value_estimator()
        return self._value_estimator
