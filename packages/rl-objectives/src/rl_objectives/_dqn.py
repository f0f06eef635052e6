"""Deep Q-learning loss (Mnih et al., 2015; double DQN: van Hasselt et al., 2016)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives._action_space import find_action_space
from rl_objectives._loss_base import LossModule, distance_loss
from rl_objectives._tensor_keys import StepKeys
from rl_objectives.value._td import td0_return_estimate

__all__ = ["DQNLoss"]


class DQNLoss(LossModule):
    """``E[d(Q(s_t, a_t), r_t + gamma (1 - m_t) Q'(s_{t+1}, a*))]``.

    ``a* = argmax_a Q'(s_{t+1}, a)`` with the target network ``Q'``, or
    ``argmax_a Q(s_{t+1}, a)`` with the online network when ``double_dqn``. The absolute
    TD error is written back to the input under ``td_error`` (for prioritized replay).

    Args:
        value_network: tensordict module writing ``action_value`` ``[*B, n_actions]``.
        gamma: discount.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        delay_value: keep a target network ``target_value_network``.
        double_dqn: select the next action with the online network.
        action_space: ``"one-hot"`` (or ``"one_hot"``), ``"categorical"``, or an action
            spec as TorchRL takes it (``OneHot``, ``Categorical``, a ``Composite`` with an
            ``"action"`` entry: ``env.action_spec``); inferred from the action's dtype when
            ``None`` (integer: categorical).
        reduction: ``"mean"`` (default), ``"sum"``, or ``"none"`` for the per-sample loss
            ``[*B]``, e.g. to weight it by prioritized replay's ``priority_weight``
            (``(out["loss"] * sample["priority_weight"]).mean()``).

    Raises:
        TypeError: ``value_network`` is not a tensordict module.
        ValueError: an unknown ``action_space`` (or a spec of another kind: multi-one-hot,
            binary, multi-categorical), ``loss_function`` or ``reduction``.
        TypeError: ``action_space`` neither a name, a spec nor ``None``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> q = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> td = TensorDict({"observation": torch.randn(5, 3), "action": torch.zeros(5).long(),
        ...     "next": {"observation": torch.randn(5, 3), "reward": torch.ones(5, 1),
        ...              "done": torch.zeros(5, 1, dtype=torch.bool)}}, [5])
        >>> out = DQNLoss(q, gamma=0.9)(td)
        >>> out["loss"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([5]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            action_value: the Q-values of all actions.
            action: the action taken (index or one-hot).
            value: where the chosen action's value is written.
            priority: where ``|TD error|`` is written.
        """

        action_value: NestedKey = _keys.ACTION_VALUE
        action: NestedKey = _keys.ACTION
        value: NestedKey = "chosen_action_value"
        priority: NestedKey = _keys.TD_ERROR

    def __init__(
        self,
        value_network: TensorDictModuleBase,
        *,
        gamma: float = 0.99,
        loss_function: str = "l2",
        delay_value: bool = True,
        double_dqn: bool = False,
        action_space: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        if not isinstance(value_network, TensorDictModuleBase):
            raise TypeError(
                f"value_network must be a tensordict.nn module, got {type(value_network).__name__}"
            )
        action_space = find_action_space(action_space, "DQNLoss")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        distance_loss(torch.zeros(1), torch.zeros(1), loss_function)
        self.reduction = reduction
        self.value_network = value_network
        self.gamma, self.loss_function = gamma, loss_function
        self.delay_value, self.double_dqn, self.action_space = delay_value, double_dqn, action_space
        if delay_value:
            self._make_target("value_network", value_network)

    def _chosen(self, action_value: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        space = self.action_space
        if space is None:
            space = ("categorical"
                     if not action.dtype.is_floating_point and action.dtype != torch.bool
                     else "one-hot")
        if space == "one-hot":
            return (action_value * action.to(action_value.dtype)).sum(-1)
        index = action.long()
        if index.ndim == action_value.ndim:
            index = index.squeeze(-1)
        return action_value.gather(-1, index.unsqueeze(-1)).squeeze(-1)

    def _next_value(self, next_td: TensorDictBase) -> torch.Tensor:
        key = self.tensor_keys.action_value
        with torch.no_grad():
            target_net = self.target_value_network if self.delay_value else self.value_network
            target_q = self._get(target_net(next_td.copy()), key)
            if self.double_dqn:
                best = self._get(self.value_network(next_td.copy()), key).argmax(-1, keepdim=True)
            else:
                best = target_q.argmax(-1, keepdim=True)
            return target_q.gather(-1, best).squeeze(-1)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute ``loss`` and write ``td_error`` into ``tensordict``.

        Args:
            tensordict: ``observation``, ``action`` and ``"next"`` with ``observation``,
                ``reward``, ``done`` (``terminated``).

        Returns:
            ``TensorDict(loss=...)``: a scalar, or ``[*B]`` with ``reduction="none"``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        keys = self.tensor_keys
        action_value = self._get(self.value_network(tensordict.copy()), keys.action_value)
        chosen = self._chosen(action_value, self._get(tensordict, keys.action))
        nxt = self._get(tensordict, _keys.NEXT)
        reward = self._get(nxt, keys.reward)
        terminated = nxt.get(keys.terminated, None)
        terminated = self._get(nxt, keys.done) if terminated is None else terminated
        next_value = self._next_value(nxt).reshape(reward.shape)
        target = td0_return_estimate(self.gamma, next_value, reward, terminated)
        target = target.reshape(chosen.shape)
        td_error = (chosen - target).detach().abs()
        tensordict.set(keys.priority, td_error)
        tensordict.set(keys.value, chosen.detach())
        loss = distance_loss(chosen, target, self.loss_function)
        if self.reduction == "mean":
            loss = loss.mean()
        elif self.reduction == "sum":
            loss = loss.sum()
        return TensorDict({"loss": loss}, batch_size=[])
