"""Deep deterministic policy gradient loss (Lillicrap et al., 2016, arXiv:1509.02971)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
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

__all__ = ["DDPGLoss"]


class DDPGLoss(OneStepTarget, LossModule):
    """DDPG: a deterministic actor ``mu`` and one critic ``Q``, each with optional targets.

    With ``m_t`` = terminated and primes for the target networks::

        y_t        = r_t + gamma (1 - m_t) Q'(s_{t+1}, mu'(s_{t+1}))       (no gradient)
        loss_value = E[d(Q(s_t, a_t), y_t)]
        loss_actor = -E[Q(s_t, mu(s_t))]                 (the critic's parameters detached)

    The actor's output joins the critic's input under the actor's own out keys, so the
    actor may end in a ``TanhModule``. ``|Q - y|`` is written back under ``td_error``.

    Args:
        actor_network: a deterministic tensordict module writing the action.
        value_network: a tensordict module reading the observation and the action and
            writing ``state_action_value``.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        delay_actor: keep a target actor ``target_actor_network``.
        delay_value: keep a target critic ``target_value_network``.
        gamma: discount (also ``make_value_estimator(gamma=...)``).
        separate_losses: accepted for TorchRL compatibility; the actor loss never moves
            the critic here.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample ``[*B]``).

    Raises:
        TypeError: a network is not a tensordict module.
        ValueError: an unknown ``loss_function`` or ``reduction``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> class Q(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3 + 2, 1)
        ...     def forward(self, obs, act):
        ...         return self.net(torch.cat([obs, act], -1))
        >>> actor = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action"])
        >>> value = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.randn(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> sorted(DDPGLoss(actor, value)(td).keys())[:2]
        ['loss_actor', 'loss_value']
    """

    @dataclasses.dataclass
    class _AcceptedKeys(StepKeys):
        """Key roles: :class:`StepKeys`' (reward, done, terminated) and these.

        Attributes:
            state_action_value: the critic's output.
            priority: where ``|Q - y|`` is written.
        """

        state_action_value: NestedKey = _keys.STATE_ACTION_VALUE
        priority: NestedKey = _keys.TD_ERROR

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase,
        *,
        loss_function: str = "l2",
        delay_actor: bool = False,
        delay_value: bool = True,
        gamma: float = 0.99,
        separate_losses: bool = False,
        reduction: str | None = None,
    ) -> None:
        super().__init__()
        check_module("actor_network", actor_network)
        check_module("value_network", value_network)
        distance_loss(torch.zeros(1), torch.zeros(1), loss_function)  # validates the name
        self.reduction = check_reduction(reduction)
        self.loss_function, self.gamma = loss_function, float(gamma)
        self.delay_actor, self.delay_value = delay_actor, delay_value
        self.actor_network, self.value_network = actor_network, value_network
        for name, delayed in (("actor_network", delay_actor), ("value_network", delay_value)):
            if delayed:
                self._make_target(name, getattr(self, name))

    def _value(self, critic, tensordict: TensorDictBase, actor_out=None) -> torch.Tensor:
        td = tensordict.select(*critic.in_keys, strict=False)
        if actor_out is not None:  # the actor's action replaces the stored one
            td.update(actor_out.select(*self.actor_network.out_keys, strict=False))
        value = self._get(critic(td), self.tensor_keys.state_action_value)
        return value.reshape(tensordict.batch_size)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute ``loss_actor`` and ``loss_value``; write ``td_error`` into the input.

        :meth:`loss_value` then :meth:`loss_actor`.

        Args:
            tensordict: ``[*B]`` with the observation, ``action`` and ``"next"``
                (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_value`` and detached diagnostics ``pred_value``,
            ``target_value``, ``pred_value_max``, ``target_value_max``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        loss_value, meta = self.loss_value(tensordict)
        loss_actor, _ = self.loss_actor(tensordict)
        return TensorDict({
            "loss_actor": loss_actor, "loss_value": loss_value,
            "pred_value": meta["pred_value"].mean(), "target_value": meta["target_value"].mean(),
            "pred_value_max": meta["pred_value_max"],
            "target_value_max": meta["target_value_max"],
        }, batch_size=[])

    def loss_value(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critic's loss alone (TorchRL's ``DDPGLoss.loss_value``); writes ``td_error``.

        Args:
            tensordict: as :meth:`forward`'s; ``|Q - y|`` is written under the priority key.

        Returns:
            ``(loss_value, metadata)``: detached ``td_error`` (``|Q - y|``), ``pred_value``,
            ``target_value`` (``[*B]``), ``pred_value_max``, ``target_value_max``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        nxt, reward, terminated = reward_terminated(self, tensordict)
        with torch.no_grad():
            actor = self.target_actor_network if self.delay_actor else self.actor_network
            critic = self.target_value_network if self.delay_value else self.value_network
            next_value = self._value(critic, nxt, act(actor, nxt))
            target = td0_return_estimate(self.gamma, next_value, reward, terminated)
        pred = self._value(self.value_network, tensordict)
        td_error = (pred - target).detach().abs()
        tensordict.set(self.tensor_keys.priority, td_error)
        loss = distance_loss(pred, target, self.loss_function)
        detached = pred.detach()
        return reduce(loss, self.reduction), {
            "td_error": td_error, "pred_value": detached, "target_value": target,
            "pred_value_max": detached.max(), "target_value_max": target.max(),
        }

    def loss_actor(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The actor's loss alone (TorchRL's ``DDPGLoss.loss_actor``): ``-Q(s, mu(s))``.

        The critic's parameters are detached: its gradient reaches the actor only.

        Args:
            tensordict: ``[*B]`` with the actor's and critic's inputs.

        Returns:
            ``(loss_actor, {})``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        actor_out = act(self.actor_network, tensordict)
        params = TensorDict.from_module(self.value_network).detach()
        with params.to_module(self.value_network):
            q_actor = self._value(self.value_network, tensordict, actor_out)
        return reduce(-q_actor, self.reduction), {}
