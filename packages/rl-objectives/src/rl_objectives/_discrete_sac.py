"""Soft actor-critic for discrete actions (Christodoulou, 2019, arXiv:1910.07207)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives import _keys
from rl_objectives._ensemble import vmap_call
from rl_objectives._loss_base import distance_loss
from rl_objectives._one_step import (
    LossAndMetadata,
    apply_torchrl_options,
    check_reduction,
    reduce,
    reward_terminated,
)
from rl_objectives._sac import SACLoss
from rl_objectives.value._td import td0_return_estimate

__all__ = ["DiscreteSACLoss"]

_ONE_HOT = ("one-hot", "one_hot", "onehot")


def _space(action_space: Any, num_actions: int | None) -> tuple[str, int | None]:
    """``("categorical" | "one-hot", n or None)`` from a name or an action spec."""
    if isinstance(action_space, str):
        if action_space not in ("categorical", *_ONE_HOT):
            raise ValueError(
                f"action_space must be 'categorical', 'one-hot' or a spec, got {action_space!r}"
            )
        return ("one-hot" if action_space in _ONE_HOT else "categorical"), num_actions
    name = type(action_space).__name__
    if "OneHot" not in name and "Categorical" not in name:
        raise ValueError(f"action_space must be a Categorical or OneHot spec, got {name}")
    n = getattr(action_space, "n", None) or getattr(getattr(action_space, "space", None), "n",
                                                    None)
    return ("one-hot" if "OneHot" in name else "categorical"), num_actions or n


class DiscreteSACLoss(SACLoss):
    """Discrete SAC: a categorical actor, critics ``Q_i(s, .)`` over every action.

    With ``p = pi(.|s)`` the actor's probabilities, ``m_t`` = terminated and primes for
    the target critics, sums over the ``n`` actions (exact expectations, no sampling)::

        V'(s_{t+1}) = sum_a p'(a) (min_i Q'_i(s_{t+1}, a) - alpha log p'(a))
        y_t         = r_t + gamma (1 - m_t) V'(s_{t+1})                 (no gradient)
        loss_qvalue = sum_i E[d(Q_i(s_t, a_t), y_t)]
        loss_actor  = E[sum_a p(a) (alpha log p(a) - min_i Q_i(s_t, a))]  (critics detached)
        loss_alpha  = -E[log(alpha) (sum_a p(a) log p(a) + target_entropy)]

    ``target_entropy="auto"`` is ``target_entropy_weight * log(n)`` (a share of the uniform
    policy's entropy), ``n`` from ``num_actions``, the spec, or the first batch.

    Args:
        actor_network: a probabilistic tensordict module whose distribution has
            ``logits`` over the actions (``Categorical``, ``OneHotCategorical``,
            ``MaskedCategorical``).
        qvalue_network: a tensordict module writing ``action_value`` ``[*B, n]``; the
            critics' template (see ``SACLoss``).
        action_space: ``"categorical"``, ``"one-hot"``, or a ``Categorical``/``OneHot``
            spec.
        num_actions: ``n`` (read from the spec when ``None``).
        num_qvalue_nets: number of critics.
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        alpha_init: initial temperature.
        min_alpha: lower bound of ``alpha``, or ``None``.
        max_alpha: upper bound of ``alpha``, or ``None``.
        fixed_alpha: keep ``alpha`` constant.
        target_entropy_weight: the share of ``log(n)`` that ``"auto"`` targets.
        target_entropy: a float or ``"auto"``.
        delay_qvalue: keep target critics.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.
        **torchrl_options: TorchRL's other keywords: ``gamma`` (the discount, 0.99; also
            ``make_value_estimator(gamma=...)``), ``priority_key`` (``set_keys(priority=...)``),
            ``separate_losses`` (accepted: the actor never moves the critics here),
            ``skip_done_states`` (must be false).

    Raises:
        TypeError: a network is not a tensordict module, the actor not probabilistic.
        ValueError: a hyper-parameter out of range.
        TypeError: an unknown keyword.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import (ProbabilisticTensorDictModule,
        ...     ProbabilisticTensorDictSequential, TensorDictModule)
        >>> actor = ProbabilisticTensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(4, 3), ["observation"], ["logits"]),
        ...     ProbabilisticTensorDictModule(["logits"], ["action"],
        ...         distribution_class=torch.distributions.Categorical))
        >>> q = TensorDictModule(torch.nn.Linear(4, 3), ["observation"], ["action_value"])
        >>> td = TensorDict({"observation": torch.randn(6, 4),
        ...     "action": torch.randint(3, (6,)),
        ...     "next": {"observation": torch.randn(6, 4), "reward": torch.randn(6, 1),
        ...              "done": torch.zeros(6, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(6, 1, dtype=torch.bool)}}, [6])
        >>> loss = DiscreteSACLoss(actor, q, action_space="categorical", num_actions=3)
        >>> sorted(loss(td).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
        >>> round(loss.target_entropy, 4)  # 0.98 log(3)
        1.0766
    """

    @dataclasses.dataclass
    class _AcceptedKeys(SACLoss._AcceptedKeys):
        """``SACLoss``'s key roles and ``action_value``, the critics' output ``[*B, n]``.

        Attributes:
            action_value: the critics' values of every action.
        """

        action_value: NestedKey = _keys.ACTION_VALUE

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        action_space: Any,
        num_actions: int | None = None,
        num_qvalue_nets: int = 2,
        loss_function: str = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        fixed_alpha: bool = False,
        target_entropy_weight: float = 0.98,
        target_entropy: float | str = "auto",
        delay_qvalue: bool = True,
        reduction: str | None = None,
        **torchrl_options: Any,
    ) -> None:
        gamma = float(torchrl_options.pop("gamma", 0.99))
        if not 0.0 < target_entropy_weight <= 1.0:
            raise ValueError(
                f"target_entropy_weight must be in (0, 1], got {target_entropy_weight}"
            )
        super().__init__(
            actor_network, qvalue_network, num_qvalue_nets=num_qvalue_nets,
            loss_function=loss_function, alpha_init=alpha_init, min_alpha=min_alpha,
            max_alpha=max_alpha, fixed_alpha=fixed_alpha,
            target_entropy=0.0 if target_entropy == "auto" else target_entropy,
            delay_actor=False, delay_qvalue=delay_qvalue, gamma=gamma,
        )
        self.action_space, self.num_actions = _space(action_space, num_actions)
        self.target_entropy_weight = float(target_entropy_weight)
        self.reduction = check_reduction(reduction)
        apply_torchrl_options(self, torchrl_options, refused=("skip_done_states",))
        if target_entropy == "auto":
            self._target_entropy = self._auto_entropy(self.num_actions)

    def _auto_entropy(self, n: int | None) -> float | None:
        return None if n is None else self.target_entropy_weight * math.log(n)

    def _log_probs(self, tensordict: TensorDictBase) -> torch.Tensor:
        """``log pi(.|s)`` ``[*B, n]`` (masked actions at the dtype's lowest value)."""
        actor = self.actor_network
        dist = actor.get_dist(tensordict.select(*actor.in_keys, strict=False))
        logp = torch.log_softmax(dist.logits, -1)
        return logp.clamp_min(torch.finfo(logp.dtype).min)

    def _action_values(self, tensordict: TensorDictBase, params) -> torch.Tensor:
        """``Q_i(s, .)`` of every critic, ``[N, *B, n]``."""
        template = self._qvalue_template
        td = tensordict.select(*template.in_keys, strict=False)
        return self._get(vmap_call(template, params, td), self.tensor_keys.action_value)

    def _chosen(self, values: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``Q_i(s, a_t)`` ``[N, *B]`` from ``[N, *B, n]`` and the stored action."""
        if self.action_space == "one-hot":
            index = action.argmax(-1)
        else:
            index = action.long().reshape(values.shape[1:-1])
        return values.gather(-1, index.expand(values.shape[:-1]).unsqueeze(-1)).squeeze(-1)

    @torch.no_grad()
    def _soft_target(self, tensordict: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        nxt, reward, terminated = reward_terminated(self, tensordict)
        logp = self._log_probs(nxt)
        q_next = self._action_values(nxt, self._target_params()).amin(0)
        next_value = (logp.exp() * (q_next - alpha * logp)).sum(-1)
        return td0_return_estimate(self.gamma, next_value, reward, terminated)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss terms and write ``td_error`` into ``tensordict``.

        The terms of :meth:`qvalue_loss`, :meth:`actor_loss` and :meth:`alpha_loss`, the
        critics run once for both of the first two.

        Args:
            tensordict: ``[*B]`` with the observation, ``action`` (index or one-hot) and
                ``"next"`` (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_qvalue``, ``loss_alpha``, ``alpha`` and ``entropy``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        alpha = self.alpha
        loss_qvalue, td_error, values = self._q_and_values(tensordict, alpha)
        tensordict.set(self.tensor_keys.priority, td_error)
        loss_actor, neg_entropy = self._actor_terms(tensordict, alpha, values.detach().amin(0))
        return TensorDict({
            "loss_actor": reduce(loss_actor, self.reduction),
            "loss_qvalue": reduce(loss_qvalue, self.reduction),
            "loss_alpha": reduce(self._alpha_terms(neg_entropy), self.reduction),
            "alpha": alpha, "entropy": -neg_entropy.mean(),
        }, batch_size=[])

    def qvalue_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``DiscreteSACLoss.qvalue_loss``).

        Args:
            tensordict: as :meth:`forward`'s; not written to.

        Returns:
            ``(loss_qvalue, {"td_error": max_i |Q_i(s, a) - y|})``, detached, ``[*B]``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        loss, td_error = self._qvalue_terms(tensordict, self.alpha)
        return reduce(loss, self.reduction), {"td_error": td_error}

    def _q_and_values(self, tensordict: TensorDictBase, alpha: torch.Tensor):
        """Per-sample ``sum_i d(Q_i(s, a), y)``, ``max_i |Q_i - y|`` and ``Q_i(s, .)``."""
        target = self._soft_target(tensordict, alpha)
        values = self._action_values(tensordict, self.qvalue_network_params)
        if self._target_entropy is None:
            self._target_entropy = self._auto_entropy(values.shape[-1])
        pred = self._chosen(values, self._get(tensordict, self.tensor_keys.action))
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        return loss, (pred.detach() - target).abs().amax(0), values

    def _qvalue_terms(self, td: TensorDictBase, alpha: torch.Tensor):
        return self._q_and_values(td, alpha)[:2]

    def _actor_terms(self, td: TensorDictBase, alpha: torch.Tensor, min_q=None):
        """Per-sample ``sum_a p(a) (alpha log p(a) - min_i Q_i(s, a))`` (critics detached)
        and ``sum_a p(a) log p(a)`` (TorchRL's ``log_prob`` metadata), detached."""
        logp = self._log_probs(td)
        if self._target_entropy is None:
            self._target_entropy = self._auto_entropy(logp.shape[-1])
        if min_q is None:
            min_q = self._action_values(td, self.qvalue_network_params.detach()).amin(0)
        probs = logp.exp()
        return (probs * (alpha * logp - min_q)).sum(-1), (probs * logp).sum(-1).detach()
