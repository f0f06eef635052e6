"""Implicit Q-learning loss (Kostrikov et al., 2021, arXiv:2110.06169)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives._ensemble import StackedCritics, stack_copies
from rl_objectives._loss_base import LossModule, distance_loss
from rl_objectives._one_step import (
    LossAndMetadata,
    OneStepTarget,
    apply_torchrl_options,
    check_module,
    check_reduction,
    reduce,
    reward_terminated,
)
from rl_objectives._tensor_keys import StepKeys
from rl_objectives.value._td import td0_return_estimate

__all__ = ["IQLLoss", "expectile_loss"]

_MAX_WEIGHT = 100.0  # the advantage weight is clipped here (the paper's code does the same)


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """``|tau - 1(diff < 0)| diff^2``, element-wise: the asymmetric L2 of IQL's value loss.

    Args:
        diff: ``Q(s, a) - V(s)``.
        expectile: ``tau`` in ``(0, 1)``; ``0.5`` is the plain squared error halved.

    Returns:
        The element-wise loss, shaped as ``diff``.
    """
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff.pow(2)


def _log_prob(actor: TensorDictModuleBase, tensordict: TensorDictBase,
              action: torch.Tensor) -> torch.Tensor:
    """``log pi(action | s)`` per batch element (a factorised distribution is summed)."""
    dist = actor.get_dist(tensordict.select(*actor.in_keys, strict=False))
    log_prob = dist.log_prob(action)
    if log_prob.ndim > tensordict.batch_dims:
        log_prob = log_prob.flatten(tensordict.batch_dims).sum(-1)
    return log_prob


class IQLLoss(StackedCritics, OneStepTarget, LossModule):
    """IQL: expectile regression of ``V`` on the critics, advantage-weighted regression actor.

    With ``Q_i`` the critics, ``Q'_i`` their targets, ``tau`` = ``expectile``,
    ``beta`` = ``temperature``, ``m_t`` = terminated and ``(s_t, a_t)`` from the dataset::

        loss_value  = E[|tau - 1(u < 0)| u^2],      u = min_i Q'_i(s_t, a_t) - V(s_t)
        loss_qvalue = sum_i E[d(Q_i(s_t, a_t), r_t + gamma (1 - m_t) V(s_{t+1}))]
        loss_actor  = -E[min(exp(beta (min_i Q'_i(s_t, a_t) - V(s_t))), 100) log pi(a_t|s_t)]

    The actor never evaluates an action outside the dataset: that is what makes IQL an
    offline method. ``V`` is detached in the critic target and in the actor's weight, the
    target critics carry no gradient, so each term moves only its own network. The critics
    are one template evaluated with stacked parameters (as ``SACLoss``'s); ``max_i |Q_i - y|``
    is written back under ``td_error``. ``entropy`` is ``-E[log pi(a_t|s_t)]`` (detached).

    Args:
        actor_network: a probabilistic tensordict module (``get_dist``).
        qvalue_network: a tensordict module reading the observation and ``action`` and
            writing ``state_action_value`` (the critics' template).
        value_network: a tensordict module writing ``state_value``. Required, as in
            TorchRL in practice (its docs say optional; its constructor has no default and
            reads the network unconditionally).
        num_qvalue_nets: number of critics (``>= 1``).
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` for the critic loss.
        temperature: the inverse temperature ``beta`` (``> 0``): small is behaviour cloning,
            large chases the critics' maximum.
        expectile: ``tau`` in ``(0, 1)``.
        gamma: discount (also ``make_value_estimator(gamma=...)``).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        **torchrl_options: ``priority_key`` (TorchRL's older ``set_keys(priority=...)``)
            and ``separate_losses`` (accepted; no term shares gradients here).

    Raises:
        TypeError: a network is not a tensordict module (``value_network=None`` included),
            or an unknown keyword.
        ValueError: a hyper-parameter is out of range.

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
        >>> qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> value = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> loss = IQLLoss(actor, qvalue, value, expectile=0.7, temperature=3.0)
        >>> sorted(loss(td).keys())
        ['entropy', 'loss_actor', 'loss_qvalue', 'loss_value']
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            action: the dataset action.
            value: the value network's output.
            state_action_value: the critics' output.
            log_prob: TorchRL's key of the actor's log-probability (kept for
                ``set_keys``; the loss recomputes it).
            priority: where ``max_i |Q_i - y|`` is written.
        """

        action: NestedKey = _keys.ACTION
        value: NestedKey = _keys.STATE_VALUE
        state_action_value: NestedKey = _keys.STATE_ACTION_VALUE
        log_prob: NestedKey = _keys.SAMPLE_LOG_PROB
        priority: NestedKey = _keys.TD_ERROR

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        temperature: float = 1.0,
        expectile: float = 0.5,
        gamma: float = 0.99,
        reduction: str | None = None,
        **torchrl_options: Any,
    ) -> None:
        super().__init__()
        if value_network is None:
            raise TypeError(
                "value_network: expected a tensordict module writing state_value (IQL's V(s): "
                "the critics' target and the actor's weight read it), received None; "
                "TorchRL's docs mark it optional, but its IQLLoss needs one too"
            )
        for name, net in (("actor_network", actor_network), ("qvalue_network", qvalue_network),
                          ("value_network", value_network)):
            check_module(name, net)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError("actor_network must be probabilistic (have get_dist), got "
                            f"{type(actor_network).__name__}")
        if not isinstance(num_qvalue_nets, int) or num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be an int >= 1, got {num_qvalue_nets!r}")
        if not 0.0 < expectile < 1.0:
            raise ValueError(f"expectile must be in (0, 1), got {expectile!r}")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        distance_loss(torch.zeros(1), torch.zeros(1), loss_function)  # validates the name
        self.reduction = check_reduction(reduction)
        self.loss_function, self.gamma = loss_function, float(gamma)
        self.temperature, self.expectile = float(temperature), float(expectile)
        self.num_qvalue_nets = num_qvalue_nets
        self.actor_network, self.value_network = actor_network, value_network
        object.__setattr__(self, "_qvalue_template", qvalue_network)  # not a submodule
        self.qvalue_network_params = stack_copies(qvalue_network, num_qvalue_nets)
        self._make_target("qvalue_network_params", self.qvalue_network_params)
        apply_torchrl_options(self, torchrl_options)

    def _state_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        td = tensordict.select(*self.value_network.in_keys, strict=False)
        value = self._get(self.value_network(td), self.tensor_keys.value)
        return value.reshape(tensordict.batch_size)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the three loss terms; write ``td_error`` into ``tensordict``.

        The terms of :meth:`value_loss`, :meth:`actor_loss` and :meth:`qvalue_loss`, the
        target critics and ``V(s)`` run once for the first two.

        Args:
            tensordict: ``[*B]`` with the observation, the dataset ``action`` and
                ``"next"`` (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_qvalue``, ``loss_value`` and ``entropy``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        action = self._get(tensordict, self.tensor_keys.action)
        q_target = self._target_q(tensordict, action)
        value = self._state_value(tensordict)
        loss_value = expectile_loss(q_target - value, self.expectile)
        loss_actor, log_prob = self._actor_terms(tensordict, action, q_target - value.detach())
        loss_qvalue, td_error = self._qvalue_terms(tensordict, action)
        tensordict.set(self.tensor_keys.priority, td_error.amax(0))
        return TensorDict({
            "loss_actor": reduce(loss_actor, self.reduction),
            "loss_qvalue": reduce(loss_qvalue, self.reduction),
            "loss_value": reduce(loss_value, self.reduction),
            "entropy": -log_prob.mean(),
        }, batch_size=[])

    def value_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """``V``'s expectile loss alone (TorchRL's ``IQLLoss.value_loss``).

        Args:
            tensordict: ``[*B]`` with the observation and the dataset ``action``.

        Returns:
            ``(loss_value, {})``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        action = self._get(tensordict, self.tensor_keys.action)
        diff = self._target_q(tensordict, action) - self._state_value(tensordict)
        return reduce(expectile_loss(diff, self.expectile), self.reduction), {}

    def actor_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The advantage-weighted actor loss alone (TorchRL's ``IQLLoss.actor_loss``).

        Args:
            tensordict: ``[*B]`` with the observation and the dataset ``action``.

        Returns:
            ``(loss_actor, {})``; ``V`` and the critics are not moved by it.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        action = self._get(tensordict, self.tensor_keys.action)
        with torch.no_grad():
            advantage = self._target_q(tensordict, action) - self._state_value(tensordict)
        return reduce(self._actor_terms(tensordict, action, advantage)[0], self.reduction), {}

    def qvalue_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``IQLLoss.qvalue_loss``); the input is not
        written to.

        Args:
            tensordict: as :meth:`forward`'s.

        Returns:
            ``(loss_qvalue, {"td_error": |Q_i - y|})``, detached, ``[num_qvalue_nets, *B]``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        action = self._get(tensordict, self.tensor_keys.action)
        loss, td_error = self._qvalue_terms(tensordict, action)
        return reduce(loss, self.reduction), {"td_error": td_error}

    @torch.no_grad()
    def _target_q(self, tensordict: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        return self._qvalues(tensordict, action, self.target_qvalue_network_params).amin(0)

    def _actor_terms(self, tensordict: TensorDictBase, action: torch.Tensor,
                     advantage: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-sample ``-exp(beta A) log pi(a|s)`` and the detached log-prob."""
        weight = torch.exp(self.temperature * advantage).clamp(max=_MAX_WEIGHT)
        log_prob = _log_prob(self.actor_network, tensordict, action)
        return -weight * log_prob, log_prob.detach()

    def _qvalue_terms(self, tensordict: TensorDictBase, action: torch.Tensor):
        """``sum_i d(Q_i(s, a), r + gamma (1 - m) V(s'))`` and ``|Q_i - y|`` per sample."""
        nxt, reward, terminated = reward_terminated(self, tensordict)
        with torch.no_grad():
            target = td0_return_estimate(self.gamma, self._state_value(nxt), reward,
                                         terminated)
        pred = self._qvalues(tensordict, action, self.qvalue_network_params)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        return loss, (pred.detach() - target).abs()
