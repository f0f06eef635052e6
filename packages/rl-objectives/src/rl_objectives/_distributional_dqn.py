"""Distributional (C51) DQN loss (Bellemare et al., 2017, arXiv:1707.06887, Alg. 1)."""

from __future__ import annotations

import dataclasses
import itertools

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

    Several discrete choices per step (the actor's ``action_space`` ``"mult-one-hot"`` or
    ``"binary"``, its ``action_blocks``) are factorised: each choice ``k`` has its own
    distributions, its own greedy ``a*_k`` inside its block and its own projected target
    (the same reward and discount), and the loss is the mean of the choices'
    cross-entropies. TorchRL's loss takes one choice only.

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
        >>> actor.register_buffer("support", torch.linspace(-5, 5, 11))  # moves with .to()
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
            action: the action taken (index or one-hot; several choices: the
                one-hot blocks concatenated, or the bits).
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

    def _support_like(self, probs: torch.Tensor) -> torch.Tensor:
        """The support in ``probs``' dtype; a clear error where it is on another device."""
        support = self.support
        if support.device != probs.device:
            raise ValueError(
                f"value_network.support is on {support.device}, its "
                f"{self.tensor_keys.action_value!r} on {probs.device}: register the support as a "
                "buffer (value_network.register_buffer('support', z), as "
                "rl_modules.DistributionalQValueActor does) so that .to(device) moves it")
        return support.to(probs.dtype)

    def _log_probs(self, net: TensorDictModuleBase, td: TensorDictBase) -> torch.Tensor:
        return self._get(net(td.copy()), self.tensor_keys.action_value)

    def _blocks(self, n_columns: int) -> list[int]:
        """Each choice's columns: the actor's ``action_blocks``, or one choice of all."""
        blocks = getattr(self.value_network, "action_blocks", None)
        return [n_columns] if blocks is None else list(blocks)

    @staticmethod
    def _gather(log_probs: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
        """``[*B, N, A]`` at each choice's column ``[*B, K]`` -> ``[*B, K, N]``."""
        index = columns.unsqueeze(-2).expand(*columns.shape[:-1], log_probs.shape[-2],
                                             columns.shape[-1])
        return log_probs.gather(-1, index).transpose(-1, -2)

    def _columns(self, action: torch.Tensor, blocks: list[int], batch: torch.Size):
        """The stored action's column of each choice, ``[*B, K]``."""
        if getattr(self.value_network, "action_space", None) == "binary":
            index = action.long().reshape(*batch, len(blocks))
        elif len(blocks) > 1 or tuple(action.shape) == (*batch, blocks[0]) and blocks[0] > 1:
            index = torch.stack([a.argmax(-1) for a in action.split(blocks, -1)], -1)
        else:  # one choice, an index
            index = action.long().reshape(*batch, 1)
        return self._offset(index, blocks)

    def _greedy_columns(self, probs: torch.Tensor, blocks: list[int]) -> torch.Tensor:
        """``a*`` of each choice from ``p`` ``[*B, N, A]``: its column, ``[*B, K]``."""
        values = (probs * self._support_like(probs).unsqueeze(-1)).sum(-2).split(blocks, -1)
        return self._offset(torch.stack([v.argmax(-1) for v in values], -1), blocks)

    @staticmethod
    def _offset(index: torch.Tensor, blocks: list[int]) -> torch.Tensor:
        """Each choice's index within its block ``[*B, K]`` moved by the block's first column,
        added as Python integers: no host-to-device copy, so a CUDA graph captures it."""
        if len(blocks) == 1:
            return index
        starts = itertools.accumulate(blocks[:-1], initial=0)
        return torch.stack([index[..., k] + start for k, start in enumerate(starts)], -1)

    def _check_columns(self, log_probs: torch.Tensor, blocks: list[int]) -> None:
        if log_probs.shape[-1] != sum(blocks):
            raise ValueError(
                f"{type(self).__name__}: expected {self.tensor_keys.action_value!r} with "
                f"{sum(blocks)} columns (choices {blocks}), received shape "
                f"{tuple(log_probs.shape)}")

    @torch.no_grad()
    def _target(self, tensordict: TensorDictBase) -> torch.Tensor:
        nxt, reward, terminated = reward_terminated(self, tensordict)
        net = self.target_value_network if self.delay_value else self.value_network
        probs = self._log_probs(net, nxt).exp()  # [*B, N, A]
        blocks = self._blocks(probs.shape[-1])
        self._check_columns(probs, blocks)
        probs_next = self._gather(probs, self._greedy_columns(probs, blocks))  # [*B, K, N]
        steps = nxt.get(self.tensor_keys.steps_to_next_obs, None)
        if steps is None:
            steps = tensordict.get(self.tensor_keys.steps_to_next_obs, None)
        gamma = self.gamma if steps is None else self.gamma ** steps.reshape(reward.shape)
        discount = gamma * (1.0 - terminated.to(reward.dtype))
        k = len(blocks)
        reward, discount = (x.unsqueeze(-1).expand(*x.shape, k) for x in (reward, discount))
        return project_distribution(probs_next, reward, discount, self._support_like(probs))

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
        blocks = self._blocks(log_probs.shape[-1])
        columns = self._columns(self._get(tensordict, self.tensor_keys.action), blocks,
                                log_probs.shape[:-2])
        chosen = self._gather(log_probs, columns)  # [*B, K, N]
        loss = -(target * chosen).sum(-1).mean(-1)
        tensordict.set(self.tensor_keys.priority, loss.detach())
        return TensorDict({"loss": reduce(loss, self.reduction)}, batch_size=[])
