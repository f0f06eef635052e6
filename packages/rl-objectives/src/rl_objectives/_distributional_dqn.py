"""Distributional (C51) DQN loss (Bellemare et al., 2017, arXiv:1707.06887, Alg. 1)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives._loss_base import LossModule
from rl_objectives._one_step import (
    OneStepTarget,
    check_module,
    check_reduction,
    reduce,
    reward_terminated,
)
from rl_objectives._tensor_keys import StepKeys

__all__ = ["DistributionalDQNLoss", "project_distribution"]


def project_distribution(
    probs_tp1: torch.Tensor, reward_t: torch.Tensor, discount_t: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """C51's projection of ``r_t + discount_t z`` onto the support ``z``.

    With ``z_1 < ... < z_N`` evenly spaced by ``dz``, ``Tz_j = clip(r + discount z_j,
    z_1, z_N)``, ``b_j = (Tz_j - z_1) / dz``, ``l = floor(b_j)``, ``u = ceil(b_j)``, atom
    ``j``'s mass ``p_j`` is split ``p_j (u - b_j)`` to ``l`` and ``p_j (b_j - l)`` to ``u``
    (all of it to ``l`` when ``b_j`` is an integer). Mass beyond the edges lands on them.

    Args:
        probs_tp1: ``p(s_{t+1}, a*)`` ``[*B, N]``.
        reward_t: ``[*B]``.
        discount_t: ``gamma^n (1 - m_t)`` ``[*B]``.
        support: ``z`` ``[N]``.

    Returns:
        The projected probabilities ``m`` ``[*B, N]`` (each row sums to that of
        ``probs_tp1``).
    """
    n = support.numel()
    v_min, v_max = support[0], support[-1]
    dz = (v_max - v_min) / (n - 1)
    tz = (reward_t.unsqueeze(-1) + discount_t.unsqueeze(-1) * support).clamp(v_min, v_max)
    b = ((tz - v_min) / dz).clamp(0, n - 1)  # rounding must not leave [0, N - 1]
    lower, upper = b.floor().long(), b.ceil().long()
    weight_lower = probs_tp1 * (upper.to(b.dtype) - b + (lower == upper).to(b.dtype))
    weight_upper = probs_tp1 * (b - lower.to(b.dtype))
    out = torch.zeros_like(probs_tp1)
    return out.scatter_add(-1, lower, weight_lower).scatter_add(-1, upper, weight_upper)


class DistributionalDQNLoss(OneStepTarget, LossModule):
    """C51: cross-entropy between ``p(s_t, a_t)`` and the projected target distribution.

    With ``z`` the support of ``value_network.support``, ``p'`` the target network's
    probabilities, ``a* = argmax_a sum_j z_j p'_j(s_{t+1}, a)`` and ``n`` the
    ``steps_to_next_obs`` (1 when the key is absent)::

        m    = Proj(r_t + gamma^n (1 - m_t) z, p'(s_{t+1}, a*))      (no gradient)
        loss = -E[sum_j m_j log p_j(s_t, a_t)]

    The per-sample cross-entropy is written back under ``td_error`` (prioritized replay,
    as TorchRL does).

    Args:
        value_network: a ``rl_modules.DistributionalQValueActor`` (anything with a
            ``support`` ``[N]`` writing log-probabilities ``[*B, N, n_actions]`` under
            ``action_value``).
        gamma: discount.
        delay_value: keep a target network ``target_value_network``.
        priority_key: TorchRL's older spelling of ``set_keys(priority=...)``.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Raises:
        TypeError: ``value_network`` is not a tensordict module or has no ``support``.
        ValueError: an unevenly spaced support or an unknown ``reduction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 11 * 2), torch.nn.Unflatten(-1, (11, 2)),
        ...                           torch.nn.LogSoftmax(dim=-2))  # atoms on dim -2
        >>> actor = TensorDictModule(net, ["observation"], ["action_value"])
        >>> actor.support = torch.linspace(-5, 5, 11)  # rl_modules.DistributionalQValueActor
        >>> td = TensorDict({"observation": torch.randn(6, 4),
        ...     "action": torch.randint(2, (6,)),
        ...     "next": {"observation": torch.randn(6, 4), "reward": torch.randn(6, 1),
        ...              "done": torch.zeros(6, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(6, 1, dtype=torch.bool)}}, [6])
        >>> out = DistributionalDQNLoss(actor, gamma=0.9)(td)
        >>> out["loss"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([6]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            action_value: the log-probabilities ``[*B, N, n_actions]``.
            action: the action taken (index or one-hot).
            priority: where the per-sample loss is written.
            steps_to_next_obs: the n of n-step returns (read under ``"next"`` or the root).
        """

        action_value: NestedKey = _keys.ACTION_VALUE
        action: NestedKey = _keys.ACTION
        priority: NestedKey = _keys.TD_ERROR
        steps_to_next_obs: NestedKey = "steps_to_next_obs"

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        gamma: float = 0.99,
        delay_value: bool = True,
        priority_key: NestedKey | None = None,
        reduction: str | None = None,
    ) -> None:
        super().__init__()
        check_module("value_network", value_network)
        support = getattr(value_network, "support", None)
        if not isinstance(support, torch.Tensor) or support.ndim != 1 or support.numel() < 2:
            raise TypeError(
                "value_network must carry its C51 support (a DistributionalQValueActor), "
                f"got {type(value_network).__name__} with support={support!r}"
            )
        gaps = support.diff()
        if not torch.allclose(gaps, gaps[0].expand_as(gaps), rtol=1e-4, atol=1e-6):
            raise ValueError(f"support must be evenly spaced, got {support.tolist()}")
        self.gamma, self.delay_value = float(gamma), delay_value
        self.reduction = check_reduction(reduction)
        if priority_key is not None:
            self.set_keys(priority=priority_key)
        self.value_network = value_network
        if delay_value:
            self._make_target("value_network", value_network)

    @property
    def support(self) -> torch.Tensor:
        """The atoms ``z`` ``[N]`` (the value network's)."""
        return self.value_network.support

    def _log_probs(self, net: TensorDictModuleBase, td: TensorDictBase) -> torch.Tensor:
        return self._get(net(td.copy()), self.tensor_keys.action_value)

    def _chosen(self, log_probs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``log p(s, a)`` ``[*B, N]`` for the stored (index or one-hot) action."""
        batch, n_actions = log_probs.shape[:-2], log_probs.shape[-1]
        if n_actions > 1 and tuple(action.shape) == (*batch, n_actions):  # one-hot
            index = action.argmax(-1)
        else:
            index = action.long().reshape(batch)
        index = index[..., None, None].expand(*batch, log_probs.shape[-2], 1)
        return log_probs.gather(-1, index).squeeze(-1)

    @torch.no_grad()
    def _target(self, tensordict: TensorDictBase) -> torch.Tensor:
        nxt, reward, terminated = reward_terminated(self, tensordict)
        net = self.target_value_network if self.delay_value else self.value_network
        probs = self._log_probs(net, nxt).exp()  # [*B, N, A]
        support = self.support.to(probs.dtype)
        best = (probs * support.unsqueeze(-1)).sum(-2).argmax(-1)  # [*B]
        index = best[..., None, None].expand(*best.shape, probs.shape[-2], 1)
        probs_next = probs.gather(-1, index).squeeze(-1)
        steps = nxt.get(self.tensor_keys.steps_to_next_obs, None)
        if steps is None:
            steps = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        gamma = self.gamma if steps is None else self.gamma ** steps.reshape(reward.shape)
        discount = gamma * (1.0 - terminated.to(reward.dtype))
        return project_distribution(probs_next, reward, discount, support)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute ``loss`` and write ``td_error`` into ``tensordict``.

        Args:
            tensordict: ``[*B]`` with the observation, ``action`` and ``"next"``
                (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``TensorDict(loss=...)``: a scalar, or ``[*B]`` with ``reduction="none"``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        target = self._target(tensordict)
        log_probs = self._log_probs(self.value_network, tensordict)
        chosen = self._chosen(log_probs, self._get(tensordict, self.tensor_keys.action))
        loss = -(target * chosen).sum(-1)
        tensordict.set(self.tensor_keys.priority, loss.detach())
        return TensorDict({"loss": reduce(loss, self.reduction)}, batch_size=[])
