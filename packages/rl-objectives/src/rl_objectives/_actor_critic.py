"""Shared pieces of the on-policy actor-critic losses (A2C, PPO)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictSequential
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives._direct import plain_output
from rl_objectives._loss_base import LossModule, ValueEstimators, distance_loss
from rl_objectives.value._estimator_base import ValueEstimatorBase

__all__ = ["ActorCriticLoss"]


def _match(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Give a per-sample log-prob/entropy the trailing singleton of ``[*B, T, 1]`` data."""
    if x.ndim == like.ndim - 1 and like.shape[-1] == 1:
        return x.unsqueeze(-1)
    return x


def _detached(x: torch.Tensor) -> torch.Tensor:
    """``x.detach()``, skipped (one op less) when ``x`` records no graph anyway."""
    return x.detach() if x.requires_grad else x


def _one_spelling(name: str, ours: float | None, torchrl: float | None, default: float) -> float:
    """The coefficient given as ``name`` or as TorchRL's ``name + "f"``, else ``default``."""
    if ours is not None and torchrl is not None:
        raise TypeError(
            f"{name}: got both {name}={ours!r} and {name}f={torchrl!r} (TorchRL's spelling "
            "of the same weight); pass only one"
        )
    value = ours if ours is not None else torchrl
    return default if value is None else value


def _torchrl_spelling(name: str) -> property:
    """A read-write property under TorchRL's spelling (``name + "f"``) of attribute ``name``."""
    return property(
        lambda self: getattr(self, name),
        lambda self, value: setattr(self, name, value),
        doc=f"TorchRL's name of :attr:`{name}` (the same value).",
    )


def _critic_head(actor: TensorDictModuleBase, critic: TensorDictModuleBase | None):
    """The critic's modules after the first one, when that first module is also the actor's.

    That is the shape ``ActorValueOperator.get_policy_operator()`` and
    ``get_value_operator()`` have: one trunk object first in both. The actor's ``get_dist``
    has written the trunk's outputs into the loss's tensordict by the time the critic runs,
    so the critic needs only this head; ``None`` when nothing is shared.
    """
    if not (isinstance(actor, TensorDictSequential) and isinstance(critic, TensorDictSequential)):
        return None
    if len(critic.module) < 2 or actor.module[0] is not critic.module[0]:
        return None
    rest = list(critic.module[1:])
    return rest[0] if len(rest) == 1 else TensorDictSequential(*rest)


class ActorCriticLoss(LossModule):
    """Actor log-probabilities, entropy, critic loss and advantage handling.

    Args:
        actor_network: a probabilistic tensordict module with ``get_dist(td)``.
        critic_network: a tensordict module writing ``state_value``; may be ``None``
            when ``critic_coef`` is 0.
        entropy_bonus: add ``loss_entropy``.
        entropy_coef: weight of the entropy bonus (default ``0.01``).
        critic_coef: weight of the critic loss (default ``1.0``).
        entropy_coeff: TorchRL's name (since 0.11) for ``entropy_coef``; give one of the
            two spellings, not both.
        critic_coeff: TorchRL's name for ``critic_coef``; likewise.
        loss_critic_type: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        normalize_advantage: standardise the advantage over the batch.
        gamma: discount of the default value estimator.
        clip_value: clip the new value to ``old value +- clip_value`` (PPO value clip).

    When actor and critic start with the same module (an ``ActorValueOperator``'s
    policy and value operators: one shared trunk), the trunk runs once a call: the critic
    head reads the features the actor's pass wrote. The gradients are those of running it
    twice (the two heads' contributions add up in the trunk either way).

    Raises:
        TypeError: the networks are not tensordict modules.
        ValueError: a coefficient is negative.
        TypeError: both spellings of one coefficient are given (``critic_coef`` and
            ``critic_coeff``, or ``entropy_coef`` and ``entropy_coeff``).
    """

    default_value_estimator = ValueEstimators.GAE
    critic_coeff = _torchrl_spelling("critic_coef")
    entropy_coeff = _torchrl_spelling("entropy_coef")

    @dataclasses.dataclass
    class _AcceptedKeys(ValueEstimatorBase._AcceptedKeys):
        """Key roles: the value estimator's (which the loss forwards to it), and ``action``.

        The loss reads ``advantage`` (computing it with the value estimator if absent),
        regresses the critic's ``value`` on ``value_target``, and weighs the action's
        log-probability against the behaviour policy's ``sample_log_prob``.

        Attributes:
            action: the action taken.
        """

        action: NestedKey = _keys.ACTION

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        critic_network: TensorDictModuleBase | None = None,
        *,
        entropy_bonus: bool = True,
        entropy_coef: float | None = None,
        critic_coef: float | None = None,
        loss_critic_type: str = "smooth_l1",
        normalize_advantage: bool = False,
        gamma: float | None = None,
        clip_value: float | None = None,
        entropy_coeff: float | None = None,
        critic_coeff: float | None = None,
    ) -> None:
        super().__init__()
        entropy_coef = _one_spelling("entropy_coef", entropy_coef, entropy_coeff, 0.01)
        critic_coef = _one_spelling("critic_coef", critic_coef, critic_coeff, 1.0)
        for name, net in (("actor_network", actor_network), ("critic_network", critic_network)):
            if net is not None and not isinstance(net, TensorDictModuleBase):
                raise TypeError(f"{name} must be a tensordict.nn module, got {type(net).__name__}")
        if not hasattr(actor_network, "get_dist"):
            raise TypeError("actor_network must be probabilistic (have get_dist(tensordict))")
        for name, value in (("entropy_coef", entropy_coef), ("critic_coef", critic_coef)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if clip_value is not None and clip_value <= 0:
            raise ValueError(f"clip_value must be > 0 or None, got {clip_value}")
        distance_loss(torch.zeros(1), torch.zeros(1), loss_critic_type)  # validates the name
        self.actor_network = actor_network
        self.critic_network = critic_network
        # Not registered as a submodule: its parameters are the critic's, and the loss's
        # state_dict keeps the keys it had.
        self.__dict__["_critic_head"] = _critic_head(actor_network, critic_network)
        self.entropy_bonus = entropy_bonus
        self.entropy_coef = entropy_coef
        self.critic_coef = critic_coef
        self.loss_critic_type = loss_critic_type
        self.normalize_advantage = normalize_advantage
        self.gamma = gamma
        self.clip_value = clip_value

    def _advantage(self, tensordict: TensorDictBase) -> torch.Tensor:
        advantage = tensordict.get(self.tensor_keys.advantage, None)
        if advantage is None:
            if self.value_estimator.value_network is None and self.critic_network is not None:
                self.value_estimator.value_network = self.critic_network
            with torch.no_grad():
                self.value_estimator(tensordict)
            advantage = self._get(tensordict, self.tensor_keys.advantage)
        advantage = _detached(advantage)
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)
        return advantage

    def _log_prob(self, tensordict: TensorDictBase):
        """``(log pi(a|s), distribution)`` under the current actor."""
        dist = self.actor_network.get_dist(tensordict)
        action = self._get(tensordict, self.tensor_keys.action)
        log_prob = dist.log_prob(action)
        if log_prob.shape == action.shape and action.ndim > tensordict.batch_dims:
            log_prob = log_prob.sum(-1)  # a factorised distribution without Independent
        return log_prob, dist

    def _entropy(self, dist, like: torch.Tensor) -> torch.Tensor:
        try:
            entropy = dist.entropy()
        except NotImplementedError:
            sample = dist.rsample() if dist.has_rsample else dist.sample()
            entropy = -dist.log_prob(sample)
        if entropy.ndim > like.ndim:
            entropy = entropy.sum(-1)
        return _match(entropy, like)

    def _critic_terms(self, tensordict: TensorDictBase) -> dict[str, torch.Tensor]:
        """Critic loss on ``tensordict``, which the actor's ``get_dist`` has just run on."""
        keys = self.tensor_keys
        target = _detached(self._get(tensordict, keys.value_target))
        old_value = tensordict.get(keys.value, None)
        critic = self._critic_head if self._critic_head is not None else self.critic_network
        value = plain_output(critic, tensordict, keys.value)  # its network, called directly
        if value is None:
            td = tensordict.select(*critic.in_keys, strict=False)  # a new TensorDict already
            value = self._get(critic(td), keys.value)
        loss = distance_loss(value, target, self.loss_critic_type)
        if self.clip_value is not None and old_value is not None:
            old_value = old_value.detach()
            clipped = old_value + (value - old_value).clamp(-self.clip_value, self.clip_value)
            loss = torch.maximum(loss, distance_loss(clipped, target, self.loss_critic_type))
        with torch.no_grad():  # 1 - var(target - value) / var(target)
            variance = target.var()
            explained = (variance - (target - value).var()) / variance.clamp_min(1e-12)
        return {"loss_critic": self.critic_coef * loss.mean(), "explained_variance": explained}

    def _common_terms(self, tensordict, dist, advantage) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.entropy_bonus:
            entropy = self._entropy(dist, advantage).mean()
            out["entropy"] = entropy.detach()
            out["loss_entropy"] = -self.entropy_coef * entropy
        if self.critic_network is not None and self.critic_coef > 0:
            out.update(self._critic_terms(tensordict))
        return out
