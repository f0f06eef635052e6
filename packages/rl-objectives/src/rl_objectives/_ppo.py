"""Proximal policy optimisation losses (Schulman et al., 2017, arXiv:1707.06347)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rl_objectives._actor_critic import ActorCriticLoss, _detached, _match

__all__ = ["ClipPPOLoss", "KLPENPPOLoss", "PPOLoss"]


class PPOLoss(ActorCriticLoss):
    """Importance-weighted policy gradient ``-E[r_t(theta) A_t]`` with a critic and entropy.

    ``r_t = pi(a_t|s_t) / mu(a_t|s_t)`` with ``mu`` the policy that collected the data
    (its ``sample_log_prob``). When the input lacks ``advantage``, the value estimator
    (GAE by default) runs first. Outputs ``loss_objective``, ``loss_critic``,
    ``loss_entropy`` and the diagnostics ``entropy``, ``kl_approx`` (``E[r - 1 - log r]``),
    ``ESS`` (effective sample size over the number of samples) and
    ``explained_variance``.

    Args:
        actor_network: a probabilistic tensordict module (``get_dist``).
        critic_network: a tensordict module writing ``state_value``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
        ...         distribution_class=torch.distributions.Normal))
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "sample_log_prob": torch.randn(8), "advantage": torch.randn(8, 1),
        ...     "value_target": torch.randn(8, 1)}, [8])
        >>> out = PPOLoss(actor, critic)(td)
        >>> sorted(k for k in out.keys() if k.startswith("loss_"))
        ['loss_critic', 'loss_entropy', 'loss_objective']
    """

    def _ratio_terms(self, tensordict: TensorDictBase):
        advantage = self._advantage(tensordict)
        log_prob, dist = self._log_prob(tensordict)
        previous = _detached(self._get(tensordict, self.tensor_keys.sample_log_prob))
        if previous.shape != log_prob.shape:
            previous = previous.reshape(log_prob.shape)
        log_weight = _match(log_prob - previous, advantage)
        return advantage, log_weight, dist

    @staticmethod
    def _diagnostics(log_weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """``ESS`` and ``kl_approx`` from the log-ratio ``log r``.

        ``ESS = (sum_i r_i)^2 / (N sum_i r_i^2) = 1 / (N sum_i p_i^2)`` with
        ``p = softmax(log r)``: one fused, overflow-free op instead of two ``logsumexp``;
        ``kl_approx = mean(r - 1 - log r)``, with ``r - 1`` as ``expm1(log r)`` (exact for
        small ``log r``). Under ``no_grad``: no autograd graph is recorded for them, and no
        ``detach`` is needed.
        """
        with torch.no_grad():
            p = log_weight.reshape(-1).softmax(0)
            ess = (torch.dot(p, p) * p.numel()).reciprocal()
            return {"ESS": ess, "kl_approx": (log_weight.expm1() - log_weight).mean()}

    def _objective(self, advantage, log_weight, ratio) -> dict[str, torch.Tensor]:
        return {"loss_objective": -(ratio * advantage).mean()}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss terms.

        Args:
            tensordict: ``observation``, ``action``, ``sample_log_prob`` and either
                ``advantage`` + ``value_target`` or what the value estimator reads.

        Returns:
            A TensorDict of scalar ``loss_*`` terms and diagnostics.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        tensordict = tensordict.copy()
        advantage, log_weight, dist = self._ratio_terms(tensordict)
        ratio = log_weight.exp()
        out = self._objective(advantage, log_weight, ratio)
        out.update(self._diagnostics(log_weight))
        out.update(self._common_terms(tensordict, dist, advantage))
        return TensorDict(out, batch_size=[])


class ClipPPOLoss(PPOLoss):
    """Clipped PPO: ``-E[min(r A, clip(r, 1 - eps, 1 + eps) A)]``.

    Adds ``clip_fraction``, the share of samples with ``|r - 1| > eps``.

    Args:
        actor_network: a probabilistic tensordict module.
        critic_network: a tensordict module writing ``state_value``.
        clip_epsilon: ``eps``.
        **kwargs: see :class:`PPOLoss`.

    Raises:
        ValueError: ``clip_epsilon`` is not in (0, 1).

    Examples:
        >>> import torch
        >>> from tensordict.nn import (ProbabilisticTensorDictModule as P,
        ...     ProbabilisticTensorDictSequential as S, TensorDictModule as M)
        >>> actor = S(M(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     P(["logits"], ["action"], distribution_class=torch.distributions.Categorical))
        >>> ClipPPOLoss(actor, None, clip_epsilon=0.1, critic_coef=0.0).clip_epsilon
        0.1
    """

    def __init__(self, actor_network: TensorDictModuleBase,
                 critic_network: TensorDictModuleBase | None = None, *,
                 clip_epsilon: float = 0.2, **kwargs: Any) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        if not 0.0 < clip_epsilon < 1.0:
            raise ValueError(f"clip_epsilon must be in (0, 1), got {clip_epsilon}")
        self.clip_epsilon = clip_epsilon

    def _objective(self, advantage, log_weight, ratio):
        eps = self.clip_epsilon
        clamped = ratio.clamp(1 - eps, 1 + eps)
        gain = torch.minimum(ratio * advantage, clamped * advantage)
        # |r - 1| > eps exactly where the clamp moved r (a comparison records no graph)
        clipped = torch.mean(clamped != ratio, dtype=ratio.dtype)
        return {"loss_objective": -gain.mean(), "clip_fraction": clipped}


class KLPENPPOLoss(PPOLoss):
    """PPO with an adaptive KL penalty: ``-E[r A] + beta KL(mu || pi)``.

    ``KL`` is estimated on the batch's actions as ``E[r - 1 - log r]``; after each call
    ``beta`` is multiplied by ``increment`` when ``KL > 1.5 dtarg`` and by ``decrement``
    when ``KL < dtarg / 1.5``. Adds ``kl`` and ``beta`` to the output.

    Args:
        actor_network: a probabilistic tensordict module.
        critic_network: a tensordict module writing ``state_value``.
        dtarg: target KL.
        beta: initial penalty weight.
        increment: growth factor of ``beta``.
        decrement: shrink factor of ``beta``.
        **kwargs: see :class:`PPOLoss`.

    Raises:
        ValueError: ``dtarg`` or ``beta`` is not positive.

    Examples:
        >>> import torch
        >>> from tensordict.nn import (ProbabilisticTensorDictModule as P,
        ...     ProbabilisticTensorDictSequential as S, TensorDictModule as M)
        >>> actor = S(M(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     P(["logits"], ["action"], distribution_class=torch.distributions.Categorical))
        >>> float(KLPENPPOLoss(actor, None, beta=0.5, critic_coef=0.0).beta)
        0.5
    """

    def __init__(self, actor_network: TensorDictModuleBase,
                 critic_network: TensorDictModuleBase | None = None, *, dtarg: float = 0.01,
                 beta: float = 1.0, increment: float = 2.0, decrement: float = 0.5,
                 **kwargs: Any) -> None:
        super().__init__(actor_network, critic_network, **kwargs)
        if dtarg <= 0 or beta < 0:
            raise ValueError(f"dtarg must be > 0 and beta >= 0, got dtarg={dtarg}, beta={beta}")
        self.dtarg, self.increment, self.decrement = dtarg, increment, decrement
        self.register_buffer("beta", torch.tensor(float(beta)))

    def _objective(self, advantage, log_weight, ratio):
        kl = (ratio - 1 - log_weight).mean()
        # The value used here, as a tensor of its own: the buffer adapts in place below.
        # cumsum (an identity on one element) rather than clone: AOT autograd may
        # recompute a clone in the backward from the buffer, after the adaptation
        # (its partitioner recomputes only allow-listed ops, and cumsum is not one).
        beta = self.beta.reshape(1).cumsum(0).reshape(())
        loss = -(ratio * advantage).mean() + beta * kl
        with torch.no_grad():
            factor = torch.where(kl > 1.5 * self.dtarg, self.increment, 1.0)
            factor = torch.where(kl < self.dtarg / 1.5, self.decrement, factor)
            self.beta.mul_(factor)
        return {"loss_objective": loss, "kl": kl.detach(), "beta": beta}
