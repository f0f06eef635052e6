"""Twin delayed DDPG loss (Fujimoto et al., 2018, arXiv:1802.09477)."""

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
    act,
    check_module,
    check_reduction,
    reduce,
    reward_terminated,
)
from rl_objectives._tensor_keys import StepKeys
from rl_objectives.value._td import td0_return_estimate

__all__ = ["TD3Loss"]


def _bounds(action_spec: Any, bounds: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(low, high)`` from a ``Bounded`` spec (``low``/``high`` or ``space``) or a pair."""
    if (action_spec is None) == (bounds is None):
        raise ValueError(
            "TD3Loss needs exactly one of action_spec (a Bounded spec) or bounds "
            f"((low, high)), got action_spec={action_spec!r}, bounds={bounds!r}"
        )
    if bounds is not None:
        low, high = bounds
    else:
        spec = action_spec.get("action") if hasattr(action_spec, "keys") else action_spec
        box = getattr(spec, "space", spec)
        if not (hasattr(box, "low") and hasattr(box, "high")):
            raise ValueError(
                f"action_spec must be a Bounded spec (low/high), got {type(spec).__name__}"
            )
        low, high = box.low, box.high
    low, high = torch.as_tensor(low).float(), torch.as_tensor(high).float()
    while low.ndim > 1 and bool((low == low[0]).all() and (high == high[0]).all()):
        low, high = low[0], high[0]  # an env's batched spec: the bounds of one env
    if not bool((low < high).all()):
        raise ValueError(f"bounds: low must be < high, got low={low}, high={high}")
    return low, high


class TD3Loss(StackedCritics, OneStepTarget, LossModule):
    """TD3: twin critics, target policy smoothing and a deterministic actor.

    With ``Q_i`` the ``num_qvalue_nets`` critics, primes for the target networks and
    ``m_t`` = terminated::

        eps        = clip(N(0, policy_noise^2), -noise_clip, noise_clip)
        a'         = clip(mu'(s_{t+1}) + eps, low, high)          (target policy smoothing)
        y_t        = r_t + gamma (1 - m_t) min_i Q'_i(s_{t+1}, a')     (no gradient)
        loss_qvalue = sum_i E[d(Q_i(s_t, a_t), y_t)]
        loss_actor = -E[Q_1(s_t, mu(s_t))]                     (critics' parameters detached)

    The policy delay (one actor step every ``d`` critic steps) is the training loop's:
    step the optimiser on ``loss_actor`` and the target updater only every ``d`` calls.
    The critics are one template evaluated with stacked parameters in one vmapped call, as
    ``SACLoss``'s. ``max_i |Q_i - y|`` is written back under ``td_error``.

    Args:
        actor_network: a deterministic tensordict module writing ``action`` inside the
            bounds (e.g. ending in ``rl_modules.TanhModule``).
        qvalue_network: a tensordict module reading the observation and ``action`` and
            writing ``state_action_value``: the critics' template (copy 0 keeps its
            values, the others are re-initialised).
        action_spec: a ``Bounded`` action spec giving ``low``/``high`` (or ``bounds``); an
            env's batched spec is fine (equal bounds along the batch dims are collapsed).
        bounds: ``(low, high)`` floats or tensors (or ``action_spec``).
        num_qvalue_nets: number of critics (``>= 1``; TD3's 2).
        policy_noise: std of the target action noise.
        noise_clip: the noise is clipped to ``[-noise_clip, noise_clip]``.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        delay_actor: keep a target actor ``target_actor_network``.
        delay_qvalue: keep target critics ``target_qvalue_network_params``.
        gamma: discount (also ``make_value_estimator(gamma=...)``).
        priority_key: TorchRL's older spelling of ``set_keys(priority=...)``.
        separate_losses: accepted for TorchRL compatibility; the actor loss never moves
            the critics here.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample ``[*B]``).

    Raises:
        TypeError: a network is not a tensordict module.
        ValueError: bounds missing or twice, a hyper-parameter out of range.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> class Q(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3 + 2, 1)
        ...     def forward(self, obs, act):
        ...         return self.net(torch.cat([obs, act], -1)).tanh()
        >>> actor = TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2),
        ...     torch.nn.Tanh()), ["observation"], ["action"])
        >>> qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.rand(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> out = TD3Loss(actor, qvalue, bounds=(-1.0, 1.0))(td)
        >>> out["loss_actor"].shape, out["loss_qvalue"].shape, td["td_error"].shape
        (torch.Size([]), torch.Size([]), torch.Size([8]))
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            action: the action taken and the actor's output.
            state_action_value: the critics' output.
            priority: where ``max_i |Q_i - y|`` is written.
        """

        action: NestedKey = _keys.ACTION
        state_action_value: NestedKey = _keys.STATE_ACTION_VALUE
        priority: NestedKey = _keys.TD_ERROR

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        action_spec: Any = None,
        bounds: tuple[Any, Any] | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        gamma: float = 0.99,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
    ) -> None:
        super().__init__()
        check_module("actor_network", actor_network)
        check_module("qvalue_network", qvalue_network)
        if not isinstance(num_qvalue_nets, int) or num_qvalue_nets < 1:
            raise ValueError(f"num_qvalue_nets must be an int >= 1, got {num_qvalue_nets!r}")
        if not (policy_noise >= 0 and noise_clip >= 0):
            raise ValueError(
                f"policy_noise and noise_clip must be >= 0, got {policy_noise}, {noise_clip}"
            )
        distance_loss(torch.zeros(1), torch.zeros(1), loss_function)  # validates the name
        low, high = _bounds(action_spec, bounds)
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        self.reduction = check_reduction(reduction)
        self.loss_function, self.gamma = loss_function, float(gamma)
        self.num_qvalue_nets = num_qvalue_nets
        self.policy_noise, self.noise_clip = float(policy_noise), float(noise_clip)
        self.delay_actor, self.delay_qvalue = delay_actor, delay_qvalue
        if priority_key is not None:
            self.set_keys(priority=priority_key)
        self.actor_network = actor_network
        object.__setattr__(self, "_qvalue_template", qvalue_network)  # not a submodule
        self.qvalue_network_params = stack_copies(qvalue_network, num_qvalue_nets)
        if delay_actor:
            self._make_target("actor_network", actor_network)
        if delay_qvalue:
            self._make_target("qvalue_network_params", self.qvalue_network_params)

    def smoothed_target_action(self, action: torch.Tensor) -> torch.Tensor:
        """``clip(action + clip(N(0, policy_noise^2), -noise_clip, noise_clip), low, high)``."""
        noise = (torch.randn_like(action) * self.policy_noise).clamp(
            -self.noise_clip, self.noise_clip)
        low, high = self.low.to(action.dtype), self.high.to(action.dtype)
        return torch.maximum(torch.minimum(action + noise, high), low)

    @torch.no_grad()
    def _target(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, torch.Tensor]:
        nxt, reward, terminated = reward_terminated(self, tensordict)
        actor = self.target_actor_network if self.delay_actor else self.actor_network
        action = self._get(act(actor, nxt), self.tensor_keys.action)
        params = (self.target_qvalue_network_params if self.delay_qvalue
                  else self.qvalue_network_params.detach())
        next_value = self._qvalues(nxt, self.smoothed_target_action(action), params).amin(0)
        return td0_return_estimate(self.gamma, next_value, reward, terminated), next_value

    def value_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``TD3Loss.value_loss``): ``loss_qvalue``.

        The input is not written to (``forward`` writes the priority from ``td_error``).

        Args:
            tensordict: as :meth:`forward`'s.

        Returns:
            ``(loss_qvalue, metadata)``: ``metadata`` holds detached ``td_error``
            (``|Q_i - y|``, ``[num_qvalue_nets, *B]``), ``next_state_value``,
            ``pred_value`` (``[num_qvalue_nets, *B]``) and ``target_value`` (``[*B]``).

        Raises:
            MissingKeyError: a needed key is absent.
        """
        return self._value_loss(tensordict)

    def _value_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        target, next_value = self._target(tensordict)
        pred = self._qvalues(tensordict, self._get(tensordict, self.tensor_keys.action),
                             self.qvalue_network_params)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        detached = pred.detach()
        return reduce(loss, self.reduction), {
            "td_error": (detached - target).abs(), "next_state_value": next_value,
            "pred_value": detached, "target_value": target,
        }

    def actor_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The actor's loss alone (TorchRL's ``TD3Loss.actor_loss``): ``-Q_1(s, mu(s))``.

        The critics' parameters are detached: its gradient reaches the actor only.

        Args:
            tensordict: ``[*B]`` with the actor's inputs.

        Returns:
            ``(loss_actor, metadata)``: ``metadata["state_action_value_actor"]`` is
            ``Q_1(s, mu(s))``, detached, ``[*B]``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        action = self._get(act(self.actor_network, tensordict), self.tensor_keys.action)
        # the first critic, detached (the detached TensorDict is cached; a slice is not)
        q_actor = self._qvalues(tensordict, action, self.qvalue_network_params.detach(), 1)[0]
        return reduce(-q_actor, self.reduction), {"state_action_value_actor": q_actor.detach()}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute ``loss_actor`` and ``loss_qvalue``; write ``td_error`` into the input.

        :meth:`value_loss` then :meth:`actor_loss`, their metadata averaged.

        Args:
            tensordict: ``[*B]`` with the observation, ``action`` and ``"next"``
                (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_qvalue`` and detached means ``pred_value``,
            ``state_action_value_actor``, ``next_state_value``, ``target_value``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        loss_qvalue, value_meta = self.value_loss(tensordict)
        tensordict.set(self.tensor_keys.priority, value_meta.pop("td_error").amax(0))
        loss_actor, actor_meta = self.actor_loss(tensordict)
        out = {"loss_actor": loss_actor, "loss_qvalue": loss_qvalue}
        out.update((k, v.mean()) for k, v in (*value_meta.items(), *actor_meta.items()))
        return TensorDict(out, batch_size=[])
