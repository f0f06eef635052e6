"""CrossQ loss (Bhatt et al., 2024, ICLR, arXiv:1902.05605): SAC without target networks,
the critics batch-normalised over the joint batch of ``(s, a)`` and ``(s', a')``."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives._ensemble import vmap_call
from rl_objectives._loss_base import distance_loss
from rl_objectives._one_step import (
    LossAndMetadata,
    check_reduction,
    reduce,
    reward_terminated,
)
from rl_objectives._sac import SACLoss
from rl_objectives.value._td import td0_return_estimate

__all__ = ["CrossQLoss"]


class CrossQLoss(SACLoss):
    """CrossQ: SAC's losses, no target critics, one joint critic forward for ``s`` and ``s'``.

    ``a' ~ pi(.|s_{t+1})`` and the stored ``(s_t, a_t)`` go through each critic ``Q_i``
    as ONE batch of ``2B`` rows, so its batch (re)normalisation layers see the statistics
    of both (the paper's point: the target then comes from the same normalisation)::

        [Q_i(s_t, a_t); Q_i(s_{t+1}, a')] = Q_i([s_t, a_t; s_{t+1}, a'])      (train mode)
        y_t         = r_t + gamma (1 - m_t) (min_i sg(Q_i(s_{t+1}, a')) - alpha log pi(a'|s_{t+1}))
        loss_qvalue = sum_i E[d(Q_i(s_t, a_t), y_t)]
        loss_actor  = E[alpha log pi(a~|s_t) - min_i Q_i(s_t, a~)]   (critics in eval mode,
                                                                     detached)
        loss_alpha  = -E[log(alpha) (log pi(a~|s_t) + target_entropy)]

    ``sg`` is stop-gradient. Use ``rl_modules.BatchRenorm1d`` in the critics (e.g.
    ``MLP(norm_class=BatchRenorm1d)``); without normalisation layers this is SAC with
    ``delay_qvalue=False``. The actor loss evaluates the critics in eval mode (running
    statistics) as sb3-contrib's CrossQ does, and restores their mode after.

    Args:
        actor_network: as ``SACLoss``'s.
        qvalue_network: the critics' template (normally with batch renormalisation).
        num_qvalue_nets: number of critics.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        alpha_init: initial temperature.
        min_alpha: lower bound of ``alpha``, or ``None``.
        max_alpha: upper bound of ``alpha``, or ``None``.
        action_spec: for ``target_entropy="auto"`` (``-prod(action shape)``).
        fixed_alpha: keep ``alpha`` constant.
        target_entropy: a float or ``"auto"``.
        gamma: discount.
        priority_key: TorchRL's older spelling of ``set_keys(priority=...)``.
        separate_losses: accepted for TorchRL compatibility.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Raises:
        TypeError: a network is not a tensordict module, the actor not probabilistic.
        ValueError: a hyper-parameter out of range.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (NormalParamExtractor, ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 4),
        ...         NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
        ...         distribution_class=torch.distributions.Normal))
        >>> class Q(torch.nn.Module):  # rl_modules.BatchRenorm1d in practice
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Sequential(torch.nn.BatchNorm1d(5),
        ...                                        torch.nn.Linear(5, 1))
        ...     def forward(self, obs, act):
        ...         return self.net(torch.cat([obs, act], -1))
        >>> critic = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> loss = CrossQLoss(actor, critic)
        >>> sorted(loss(td).keys()), loss.target_pairs()
        (['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue'], [])
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        gamma: float = 0.99,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
    ) -> None:
        super().__init__(
            actor_network, qvalue_network, num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function, alpha_init=alpha_init, min_alpha=min_alpha,
            max_alpha=max_alpha, action_spec=action_spec, fixed_alpha=fixed_alpha,
            target_entropy=target_entropy, delay_actor=False, delay_qvalue=False, gamma=gamma,
        )
        self.reduction = check_reduction(reduction)
        if priority_key is not None:
            self.set_keys(priority=priority_key)

    def _joint_qvalues(self, td: TensorDictBase, next_td: TensorDictBase,
                       next_action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``Q_i(s, a)`` and ``Q_i(s', a')``, ``[N, *B]`` each, from one ``2B`` forward."""
        template, key = self._qvalue_template, self.tensor_keys.action
        now = td.select(*template.in_keys, strict=False).reshape(-1)
        nxt = next_td.select(*template.in_keys, strict=False)
        nxt.set(key, next_action)
        joint = torch.cat([now, nxt.reshape(-1)], 0)
        out = vmap_call(template, self.qvalue_network_params, joint)
        value = self._get(out, self.tensor_keys.state_action_value).reshape(out.shape[0], -1)
        n = now.shape[0]
        shape = (value.shape[0], *td.batch_size)
        return value[:, :n].reshape(shape), value[:, n:].reshape(shape)

    def _actor_qvalue(self, td: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        template = self._qvalue_template
        modes = [m.training for m in template.modules()]
        template.eval()
        try:
            return self._qvalues(td, action, self.qvalue_network_params.detach()).amin(0)
        finally:
            for m, mode in zip(template.modules(), modes, strict=True):
                m.training = mode

    def _qvalue_terms(self, td: TensorDictBase, alpha: torch.Tensor):
        """Per-sample ``sum_i d(Q_i(s, a), y)`` and ``max_i |Q_i - y|`` from the joint pass."""
        nxt, reward, terminated = reward_terminated(self, td)
        with torch.no_grad():
            next_action, next_log_prob = self._sample(self.actor_network, nxt)
        pred, next_q = self._joint_qvalues(td, nxt, next_action)
        next_value = next_q.detach().amin(0) - alpha * next_log_prob
        target = td0_return_estimate(self.gamma, next_value, reward, terminated)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        return loss, (pred.detach() - target).abs().amax(0)

    def qvalue_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``CrossQLoss.qvalue_loss``): ``loss_qvalue``.

        Call it before :meth:`actor_loss` (TorchRL's order: this pass updates the batch
        renormalisation statistics the actor loss then reads). The input is not written to.

        Args:
            tensordict: as :meth:`forward`'s.

        Returns:
            ``(loss_qvalue, {"td_error": max_i |Q_i - y|})``, the error detached, ``[*B]``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        loss, td_error = self._qvalue_terms(tensordict.copy(), self.alpha)
        return reduce(loss, self.reduction), {"td_error": td_error}

    def alpha_loss(self, log_prob: torch.Tensor,
                   tensordict: TensorDictBase | None = None) -> torch.Tensor:
        """``-log(alpha) (log_prob + target_entropy)``, reduced (TorchRL's ``alpha_loss``).

        Args:
            log_prob: ``metadata["log_prob"]`` of :meth:`actor_loss`.
            tensordict: accepted for TorchRL compatibility (unused).

        Returns:
            The loss, reduced with ``reduction`` (TorchRL's ``CrossQLoss`` reduces it).

        Raises:
            RuntimeError: ``target_entropy="auto"`` still unknown.
        """
        return reduce(self._alpha_terms(log_prob), self.reduction)
