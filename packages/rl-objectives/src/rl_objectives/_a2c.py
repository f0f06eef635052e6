"""Advantage actor-critic loss (Mnih et al., 2016, A3C, arXiv:1602.01783)."""

from __future__ import annotations

from tensordict import TensorDict, TensorDictBase

from rl_objectives._actor_critic import ActorCriticLoss, _match

__all__ = ["A2CLoss"]


class A2CLoss(ActorCriticLoss):
    """``loss_objective = -E[log pi(a_t|s_t) A_t]`` plus critic and entropy terms.

    Args:
        actor_network: a probabilistic tensordict module (``get_dist``).
        critic_network: a tensordict module writing ``state_value``.

    Other keyword arguments are those of :class:`ActorCriticLoss`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (ProbabilisticTensorDictModule as P,
        ...     ProbabilisticTensorDictSequential as S, TensorDictModule as M)
        >>> actor = S(M(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     P(["logits"], ["action"], distribution_class=torch.distributions.Categorical))
        >>> critic = M(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict({"observation": torch.randn(6, 3), "action": torch.zeros(6).long(),
        ...     "advantage": torch.randn(6, 1), "value_target": torch.randn(6, 1)}, [6])
        >>> sorted(A2CLoss(actor, critic)(td).keys())
        ['entropy', 'explained_variance', 'loss_critic', 'loss_entropy', 'loss_objective']
    """

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss terms.

        Args:
            tensordict: ``observation``, ``action`` and ``advantage`` + ``value_target``
                (or what the value estimator reads).

        Returns:
            A TensorDict of scalar ``loss_*`` terms and diagnostics.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        tensordict = tensordict.copy()
        advantage = self._advantage(tensordict)
        log_prob, dist = self._log_prob(tensordict)
        out = {"loss_objective": -(_match(log_prob, advantage) * advantage).mean()}
        out.update(self._common_terms(tensordict, dist, advantage))
        return TensorDict(out, batch_size=[])
