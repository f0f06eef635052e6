"""Soft actor-critic loss (Haarnoja et al., 2018, arXiv:1801.01290 and arXiv:1812.05905)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from rl_objectives import _keys
from rl_objectives._ensemble import StackedCritics, stack_copies
from rl_objectives._loss_base import LossModule, ValueEstimators, distance_loss
from rl_objectives._one_step import LossAndMetadata, OneStepTarget, check_module, reduce
from rl_objectives._tensor_keys import StepKeys
from rl_objectives.value._td import td0_return_estimate

__all__ = ["SACLoss"]


def _check_alpha(alpha_init: float, min_alpha: float | None, max_alpha: float | None) -> None:
    if not alpha_init > 0:
        raise ValueError(f"alpha_init must be > 0, got {alpha_init}")
    for name, bound in (("min_alpha", min_alpha), ("max_alpha", max_alpha)):
        if bound is not None and not bound > 0:
            raise ValueError(f"{name} must be > 0 or None, got {bound}")
    if min_alpha is not None and max_alpha is not None and min_alpha > max_alpha:
        raise ValueError(f"min_alpha must be <= max_alpha, got {min_alpha} > {max_alpha}")


class SACLoss(StackedCritics, OneStepTarget, LossModule):
    """Soft actor-critic: clipped double-Q critics, a reparameterised actor, learned ``alpha``.

    With ``Q_i`` the ``num_qvalue_nets`` critics, ``Q'_i`` their targets, ``a~ ~ pi(.|s)``
    drawn with ``rsample`` and ``m_t`` = terminated::

        loss_qvalue = sum_i E[d(Q_i(s_t, a_t), y_t)]
        y_t         = r_t + gamma (1 - m_t) (min_i Q'_i(s_{t+1}, a~') - alpha log pi(a~'|s_{t+1}))
        loss_actor  = E[alpha log pi(a~|s_t) - min_i Q_i(s_t, a~)]     (critics frozen)
        loss_alpha  = -E[log(alpha) (log pi(a~|s_t) + target_entropy)]

    With a ``value_network`` (SAC v1), ``y_t = r_t + gamma (1 - m_t) V'(s_{t+1})`` and
    ``loss_value = E[d(V(s_t), min_i Q'_i(s_t, a~) - alpha log pi(a~|s_t))]`` is added.
    The target ``y`` is built without gradient; truncated steps bootstrap, terminated ones
    do not. ``alpha`` and ``log pi`` are detached where they are not the variable of the
    term, so each loss term moves only its own parameters. The max over critics of
    ``|Q_i - y|`` is written back to the input under ``td_error`` (prioritized replay).

    Inputs are ``[*B]`` or ``[*B, T]`` TensorDicts with ``observation``, ``action`` and
    ``"next"`` holding ``observation``, ``reward``, ``done`` and ``terminated``.

    Args:
        actor_network: a probabilistic tensordict module (``get_dist``) whose
            distribution has ``rsample`` (e.g. a tanh-transformed Normal).
        qvalue_network: a tensordict module reading the observation and ``action`` and
            writing ``state_action_value``. It serves as the template of the critics,
            whose stacked parameters live in ``qvalue_network_params``: copy 0 starts from
            the module's values, the others are re-initialised.
        value_network: a tensordict module writing ``state_value`` (SAC v1), or ``None``.
        num_qvalue_nets: number of critics (``>= 1``).
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        alpha_init: initial temperature.
        min_alpha: lower bound of ``alpha``, or ``None``.
        max_alpha: upper bound of ``alpha``, or ``None``.
        action_spec: anything with a ``shape`` (or a shape) for ``target_entropy="auto"``;
            when ``None`` the action shape is read from the first batch. A composite spec
            (a batched env's ``full_action_spec``) counts only the action's dims past the
            composite's own (batch) shape; a plain spec counts all of its dims, so a batched
            ``env.action_spec`` of shape ``[N, d]`` gives ``-N * d``, TorchRL's rule.
        fixed_alpha: keep ``alpha`` constant (``log_alpha`` is a buffer).
        target_entropy: a float, or ``"auto"`` for ``-prod(action_shape)``.
        delay_actor: draw the next action from a target actor ``target_actor_network``.
        delay_qvalue: keep target critics ``target_qvalue_network_params``.
        delay_value: keep a target value network (SAC v1 only).
        gamma: discount (also settable with ``make_value_estimator(gamma=...)``).

    Raises:
        TypeError: a network is not a tensordict module, or the actor is not
            probabilistic.
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
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> loss = SACLoss(actor, qvalue, gamma=0.99)
        >>> sorted(loss(td).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
        >>> loss.target_entropy
        -2.0
    """

    default_value_estimator = ValueEstimators.TD0
    reduction = "mean"  # CrossQLoss and others take it as an argument

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            action: the action taken (and the critics' action input).
            state_action_value: the critics' output.
            value: the value network's output (SAC v1).
            log_prob: the key of the actor's log-probability (TorchRL's name, kept for
                ``set_keys`` compatibility; the loss recomputes it).
            priority: where ``max_i |Q_i - y|`` is written.
        """

        action: NestedKey = _keys.ACTION
        state_action_value: NestedKey = _keys.STATE_ACTION_VALUE
        value: NestedKey = _keys.STATE_VALUE
        log_prob: NestedKey = _keys.SAMPLE_LOG_PROB
        priority: NestedKey = _keys.TD_ERROR

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase | None = None,
        *,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: Any = None,
        fixed_alpha: bool = False,
        target_entropy: float | str = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        delay_value: bool = True,
        gamma: float = 0.99,
    ) -> None:
        super().__init__()
        check_module("actor_network", actor_network, probabilistic=True)
        check_module("qvalue_network", qvalue_network)
        if value_network is not None:
            check_module("value_network", value_network)
        if not isinstance(num_qvalue_nets, int) or num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be an int >= 1, got {num_qvalue_nets!r}")
        distance_loss(torch.zeros(1), torch.zeros(1), loss_function)  # validates the name
        _check_alpha(alpha_init, min_alpha, max_alpha)
        if target_entropy != "auto" and not isinstance(target_entropy, (int, float)):
            raise ValueError(f"target_entropy must be 'auto' or a float, got {target_entropy!r}")
        self.loss_function, self.num_qvalue_nets = loss_function, num_qvalue_nets
        self.delay_actor, self.delay_qvalue = delay_actor, delay_qvalue
        self.delay_value = delay_value and value_network is not None
        self.gamma, self.fixed_alpha = float(gamma), fixed_alpha
        self.actor_network, self.value_network = actor_network, value_network
        object.__setattr__(self, "_qvalue_template", qvalue_network)  # not a submodule
        self.qvalue_network_params = stack_copies(qvalue_network, num_qvalue_nets)
        for name, delayed in (("actor_network", delay_actor),
                              ("qvalue_network_params", delay_qvalue),
                              ("value_network", self.delay_value)):
            if delayed:
                self._make_target(name, getattr(self, name))
        self._init_alpha(alpha_init, min_alpha, max_alpha)
        self._target_entropy = self._resolve_target_entropy(target_entropy, action_spec)

    def _init_alpha(self, alpha_init: float, min_alpha, max_alpha) -> None:
        log_alpha = torch.tensor(math.log(alpha_init))
        if self.fixed_alpha:
            self.register_buffer("log_alpha", log_alpha)
        else:
            self.log_alpha = nn.Parameter(log_alpha)
        self.min_log_alpha = math.log(min_alpha) if min_alpha is not None else None
        self.max_log_alpha = math.log(max_alpha) if max_alpha is not None else None

    @staticmethod
    def _resolve_target_entropy(target_entropy, action_spec) -> float | None:
        if target_entropy != "auto":
            return float(target_entropy)
        if action_spec is None:
            return None  # read from the first batch's action
        shape = getattr(action_spec, "shape", action_spec)
        if hasattr(action_spec, "keys") and _keys.ACTION in action_spec:
            # a composite spec (``env.full_action_spec``): its own shape is the env's batch,
            # so only the action's dims past it count (TorchRL's rule); a plain spec counts
            # every dim, a batched ``env.action_spec`` its env dims too
            shape = action_spec[_keys.ACTION].shape[len(shape):]
        return -float(math.prod(shape))

    @property
    def target_entropy(self) -> float | None:
        """The entropy target (``None`` until known when ``"auto"`` without a spec)."""
        return self._target_entropy

    @property
    def alpha(self) -> torch.Tensor:
        """The current temperature ``exp(log_alpha)``, clamped to its bounds (detached)."""
        if self.min_log_alpha is not None or self.max_log_alpha is not None:
            with torch.no_grad():
                self.log_alpha.clamp_(self.min_log_alpha, self.max_log_alpha)
        return self.log_alpha.detach().exp()

    def _sample(self, actor: nn.Module, tensordict: TensorDictBase):
        """``(a~, log pi(a~|s))`` with a reparameterised sample, log-prob per batch element."""
        dist = actor.get_dist(tensordict)
        if not dist.has_rsample:
            raise TypeError(
                f"SACLoss needs an actor distribution with rsample, got {type(dist).__name__}"
            )
        action = dist.rsample()
        log_prob = dist.log_prob(action)
        if log_prob.ndim > tensordict.batch_dims:  # a factorised distribution
            log_prob = log_prob.flatten(tensordict.batch_dims).sum(-1)
        return action, log_prob

    def _state_value(self, net: nn.Module, tensordict: TensorDictBase) -> torch.Tensor:
        td = tensordict.select(*net.in_keys, strict=False)
        return self._get(net(td), self.tensor_keys.value).reshape(tensordict.batch_size)

    def _target_params(self):
        return self.target_qvalue_network_params if self.delay_qvalue else (
            self.qvalue_network_params.detach())

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss terms and write ``td_error`` into ``tensordict``.

        The terms of :meth:`qvalue_v2_loss`, :meth:`actor_loss`, :meth:`alpha_loss` (and
        :meth:`value_loss` with a value network), in that order, from one shallow copy.

        Args:
            tensordict: ``[*B]`` or ``[*B, T]``, with the critics' and actor's inputs,
                ``action`` and ``"next"`` (observation, ``reward``, ``done``,
                ``terminated``).

        Returns:
            A TensorDict of scalars: ``loss_actor``, ``loss_qvalue``, ``loss_alpha``
            (and ``loss_value`` with a value network), ``alpha`` and ``entropy``.

        Raises:
            MissingKeyError: a needed key is absent.
            TypeError: the actor's distribution has no ``rsample``.
        """
        td = tensordict.copy()
        if self._target_entropy is None:
            self._infer_target_entropy(self._get(td, self.tensor_keys.action), td)
        alpha = self.alpha
        loss_qvalue, td_error = self._qvalue_terms(td, alpha)
        tensordict.set(self.tensor_keys.priority, td_error)
        loss_actor, log_prob = self._actor_terms(td, alpha)
        out = {
            "loss_qvalue": reduce(loss_qvalue, self.reduction),
            "loss_actor": reduce(loss_actor, self.reduction),
            "loss_alpha": reduce(self._alpha_terms(log_prob), self.reduction),
            "alpha": alpha, "entropy": -log_prob.mean(),
        }
        if self.value_network is not None:
            out["loss_value"] = self._value_loss(td, alpha)
        return TensorDict(out, batch_size=[])

    def _infer_target_entropy(self, action: torch.Tensor, td: TensorDictBase) -> None:
        """``"auto"`` without a spec: ``-prod(action shape)``, read from the first batch."""
        self._target_entropy = -float(math.prod(action.shape[td.batch_dims:]))

    def qvalue_v2_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``SACLoss.qvalue_v2_loss``): ``loss_qvalue``.

        With a value network the target is ``r + gamma (1 - m) V'(s')`` (SAC v1's), each
        critic on the whole batch. The input is not written to.

        Args:
            tensordict: as :meth:`forward`'s.

        Returns:
            ``(loss_qvalue, {"td_error": max_i |Q_i - y|})``, the error detached, ``[*B]``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        loss, td_error = self._qvalue_terms(tensordict.copy(), self.alpha)
        return reduce(loss, self.reduction), {"td_error": td_error}

    def actor_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The actor's loss alone (TorchRL's ``actor_loss``): ``alpha log pi(a~|s) - min_i Q_i``.

        The critics' parameters and ``alpha`` are detached: its gradient reaches the
        actor only. Call it before :meth:`alpha_loss`, which takes its ``log_prob``.

        Args:
            tensordict: ``[*B]`` with the actor's and critics' inputs.

        Returns:
            ``(loss_actor, {"log_prob": log pi(a~|s)})``, the log-prob detached, ``[*B]``.

        Raises:
            MissingKeyError: a needed key is absent.
            TypeError: the actor's distribution has no ``rsample``.
        """
        td = tensordict.copy()
        loss, log_prob = self._actor_terms(td, self.alpha)
        return reduce(loss, self.reduction), {"log_prob": log_prob}

    def alpha_loss(self, log_prob: torch.Tensor) -> torch.Tensor:
        """``-log(alpha) (log_prob + target_entropy)`` per sample (TorchRL's ``alpha_loss``).

        Args:
            log_prob: ``metadata["log_prob"]`` of :meth:`actor_loss`.

        Returns:
            The per-sample loss (not reduced, as TorchRL's ``SACLoss.alpha_loss``).

        Raises:
            RuntimeError: ``target_entropy="auto"`` still unknown (no ``action_spec`` and
                no batch seen yet).
        """
        return self._alpha_terms(log_prob)

    def _alpha_terms(self, log_prob: torch.Tensor) -> torch.Tensor:
        if self._target_entropy is None:
            raise RuntimeError(
                f"{type(self).__name__}.alpha_loss: target_entropy='auto' is not known yet; "
                "pass action_spec= or call actor_loss (or the loss) on a batch first"
            )
        return -self.log_alpha * (log_prob.detach() + self._target_entropy)

    def _actor_terms(self, td: TensorDictBase, alpha: torch.Tensor):
        """Per-sample ``alpha log pi(a~|s) - min_i Q_i(s, a~)`` and the detached log-prob."""
        action, log_prob = self._sample(self.actor_network, td)
        if self._target_entropy is None:
            self._infer_target_entropy(action, td)
        return alpha * log_prob - self._actor_qvalue(td, action), log_prob.detach()

    def _actor_qvalue(self, td: TensorDictBase, action: torch.Tensor) -> torch.Tensor:
        """``min_i Q_i(s, action)`` with the critics' parameters detached."""
        return self._qvalues(td, action, self.qvalue_network_params.detach()).amin(0)

    def _qvalue_terms(self, td: TensorDictBase, alpha: torch.Tensor):
        """Per-sample ``sum_i d(Q_i(s, a), y)`` and ``max_i |Q_i - y|`` (detached), ``[*B]``."""
        keys = self.tensor_keys
        target = self._qvalue_target(td, alpha)
        pred = self._qvalues(td, self._get(td, keys.action), self.qvalue_network_params)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function)
        return loss.sum(0), (pred.detach() - target).abs().amax(0)

    @torch.no_grad()
    def _qvalue_target(self, td: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        """``y = r + gamma (1 - m) V_soft(s')``, shape ``[*B]``, without gradient."""
        keys = self.tensor_keys
        nxt = self._get(td, _keys.NEXT).copy()
        reward = self._get(nxt, keys.reward)
        terminated = nxt.get(keys.terminated, None)
        terminated = self._get(nxt, keys.done) if terminated is None else terminated
        if self.value_network is not None:
            net = self.target_value_network if self.delay_value else self.value_network
            next_value = self._state_value(net, nxt)
        else:
            actor = self.target_actor_network if self.delay_actor else self.actor_network
            action, log_prob = self._sample(actor, nxt)
            q = self._qvalues(nxt, action, self._target_params()).amin(0)
            next_value = q - alpha * log_prob
        batch = td.batch_size
        return td0_return_estimate(self.gamma, next_value, reward.reshape(batch),
                                   terminated.reshape(batch))

    def value_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """SAC v1's value-network loss alone (TorchRL's ``SACLoss.value_loss``).

        Args:
            tensordict: ``[*B]`` with the value network's, actor's and critics' inputs.

        Returns:
            ``(loss_value, {})``.

        Raises:
            ValueError: the loss has no ``value_network``.
            MissingKeyError: a needed key is absent.
        """
        if self.value_network is None:
            raise ValueError(
                f"{type(self).__name__}.value_loss needs a value_network (SAC v1); this loss "
                "was built without one (value_network=None)"
            )
        return self._value_loss(tensordict.copy(), self.alpha), {}

    def _value_loss(self, td: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        """SAC v1: ``V(s)`` regresses on ``min_i Q'_i(s, a~) - alpha log pi(a~|s)``."""
        with torch.no_grad():
            action, log_prob = self._sample(self.actor_network, td)
            target = self._qvalues(td, action, self._target_params()).amin(0) - alpha * log_prob
        value = self._state_value(self.value_network, td)
        return distance_loss(value, target, self.loss_function).mean()
