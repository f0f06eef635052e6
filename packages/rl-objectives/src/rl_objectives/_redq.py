"""Randomized ensembled double Q-learning loss (Chen et al., 2021, arXiv:2101.05982)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rl_objectives._loss_base import distance_loss
from rl_objectives._one_step import (
    apply_torchrl_options,
    check_reduction,
    not_a_part,
    reduce,
    reward_terminated,
)
from rl_objectives._sac import SACLoss
from rl_objectives.value._td import td0_return_estimate

__all__ = ["REDQLoss"]


class REDQLoss(SACLoss):
    """REDQ: an ensemble of ``N`` critics, the target's minimum over a random subset of ``M``.

    With ``K`` a subset of ``M`` of the ``N`` target critics drawn anew at every call,
    ``a' ~ pi(.|s_{t+1})`` and ``a~ ~ pi(.|s_t)`` (reparameterised)::

        V'(s_{t+1}) = min_{i in K} Q'_i(s_{t+1}, a') - alpha log pi(a'|s_{t+1})
        y_t         = r_t + gamma (1 - m_t) V'(s_{t+1})
        loss_qvalue = sum_{i=1..N} E[d(Q_i(s_t, a_t), y_t)]
        loss_actor  = E[alpha log pi(a~|s_t) - (1/N) sum_i Q_i(s_t, a~)]   (critics detached)
        loss_alpha  = -E[log(alpha) (log pi(a~|s_t) + target_entropy)]

    The ``N`` critics are one template with stacked parameters, evaluated in one vmapped
    call (as ``SACLoss``'s). REDQ's update-to-data ratio (``G`` gradient steps per frame)
    belongs to the training loop, not to the loss.

    Args:
        actor_network: as ``SACLoss``'s.
        qvalue_network: the critics' template.
        num_qvalue_nets: ``N`` (TorchRL's default 10).
        sub_sample_len: ``M``, the size of the target's subset (``1 <= M <= N``).
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        alpha_init: initial temperature.
        min_alpha: lower bound of ``alpha`` (TorchRL's default 0.1), or ``None``.
        max_alpha: upper bound of ``alpha`` (TorchRL's default 10), or ``None``.
        action_spec: for ``target_entropy="auto"``.
        fixed_alpha: keep ``alpha`` constant.
        target_entropy: a float or ``"auto"``.
        delay_qvalue: keep target critics.
        gamma: discount.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        **torchrl_options: TorchRL's other keywords: ``priority_key``
            (``set_keys(priority=...)``), ``separate_losses`` (accepted), ``gSDE`` (must be
            false).

    Raises:
        TypeError: a network is not a tensordict module, the actor not probabilistic.
        ValueError: ``sub_sample_len`` out of range or another bad hyper-parameter.
        TypeError: an unknown keyword.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> class Q(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3 + 2, 1)
        ...     def forward(self, obs, act):
        ...         return self.net(torch.cat([obs, act], -1))
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 4),
        ...         NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
        ...         distribution_class=torch.distributions.Normal))
        >>> q = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> loss = REDQLoss(actor, q, num_qvalue_nets=5, sub_sample_len=2)
        >>> out = loss(td)
        >>> loss.qvalue_network_params.batch_size, out["loss_qvalue"].shape
        (torch.Size([5]), torch.Size([]))
    """

    # SACLoss's per-part methods would compute SAC's terms, not this loss's
    qvalue_v2_loss, actor_loss = not_a_part("qvalue_v2_loss"), not_a_part("actor_loss")
    alpha_loss, value_loss = not_a_part("alpha_loss"), not_a_part("value_loss")

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 10,
        sub_sample_len: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = 0.1,
        max_alpha: float | None = 10.0,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_qvalue: bool = True,
        gamma: float = 0.99,
        reduction: str | None = None,
        **torchrl_options: Any,
    ) -> None:
        super().__init__(
            actor_network, qvalue_network, num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function, alpha_init=alpha_init, min_alpha=min_alpha,
            max_alpha=max_alpha, action_spec=action_spec, fixed_alpha=fixed_alpha,
            target_entropy=target_entropy, delay_actor=False, delay_qvalue=delay_qvalue,
            gamma=gamma,
        )
        if not isinstance(sub_sample_len, int) or not 1 <= sub_sample_len <= num_qvalue_nets:
            raise ValueError(
                f"sub_sample_len must be an int in [1, num_qvalue_nets={num_qvalue_nets}], "
                f"got {sub_sample_len!r}"
            )
        self.sub_sample_len = sub_sample_len
        self.reduction = check_reduction(reduction)
        apply_torchrl_options(self, torchrl_options, refused=("gSDE",))

    def subset(self) -> torch.Tensor:
        """``M`` distinct critic indices drawn uniformly (a new subset at every call)."""
        device = self.log_alpha.device
        return torch.randperm(self.num_qvalue_nets, device=device)[: self.sub_sample_len]

    @torch.no_grad()
    def _subset_target(self, td: TensorDictBase, alpha: torch.Tensor):
        nxt, reward, terminated = reward_terminated(self, td)
        action, log_prob = self._sample(self.actor_network, nxt)
        params = self._target_params()[self.subset()]
        next_value = self._qvalues(nxt, action, params).amin(0) - alpha * log_prob
        return td0_return_estimate(self.gamma, next_value, reward, terminated), next_value

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss terms and write ``td_error`` into ``tensordict``.

        Args:
            tensordict: ``[*B]`` with the observation, ``action`` and ``"next"``
                (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha``, ``entropy`` and
            TorchRL's detached diagnostics ``state_action_value_actor``,
            ``action_log_prob_actor``, ``next.state_value``, ``target_value``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        keys, alpha, td = self.tensor_keys, self.alpha, tensordict.copy()
        action = self._get(td, keys.action)
        if self._target_entropy is None:
            self._target_entropy = -float(action.shape[td.batch_dims:].numel())
        target, next_value = self._subset_target(td, alpha)
        pred = self._qvalues(td, action, self.qvalue_network_params)
        tensordict.set(keys.priority, (pred.detach() - target).abs().amax(0))
        loss_qvalue = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        new_action, log_prob = self._sample(self.actor_network, td)
        q_actor = self._qvalues(td, new_action, self.qvalue_network_params.detach()).mean(0)
        loss_alpha = -self.log_alpha * (log_prob.detach() + self._target_entropy)
        return TensorDict({
            "loss_actor": reduce(alpha * log_prob - q_actor, self.reduction),
            "loss_qvalue": reduce(loss_qvalue, self.reduction),
            "loss_alpha": reduce(loss_alpha, self.reduction),
            "alpha": alpha, "entropy": -log_prob.detach().mean(),
            "state_action_value_actor": q_actor.detach().mean(),
            "action_log_prob_actor": log_prob.detach().mean(),
            "next.state_value": next_value.mean(), "target_value": target.mean(),
        }, batch_size=[])
