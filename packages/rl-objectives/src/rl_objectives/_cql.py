"""Conservative Q-learning loss, continuous actions (Kumar et al., 2020, arXiv:2006.04779)."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import nn

from rl_objectives._loss_base import distance_loss
from rl_objectives._one_step import check_reduction, not_a_part, reduce, reward_terminated
from rl_objectives._sac import SACLoss
from rl_objectives._td3 import _bounds
from rl_objectives.value._td import td0_return_estimate

__all__ = ["CQLLoss"]

_MAX_ALPHA_PRIME = 1e6
_SAC_OPTIONS = ("alpha_init", "min_alpha", "max_alpha", "action_spec", "fixed_alpha",
                "target_entropy", "delay_actor", "delay_qvalue")


def _uniform_bounds(action_spec: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The box of CQL's uniform actions: a ``Bounded`` spec's ``low``/``high``, else
    ``[-1, 1]`` (TorchRL's, for a tanh actor)."""
    spec = action_spec.get("action") if hasattr(action_spec, "keys") else action_spec
    box = getattr(spec, "space", spec)
    if hasattr(box, "low") and hasattr(box, "high"):
        return _bounds(spec, None)
    return torch.tensor(-1.0), torch.tensor(1.0)


class CQLLoss(SACLoss):
    """CQL(H): SAC's critics, actor and temperature plus a conservative critic penalty.

    With ``Q_i`` the two critics, ``Q'_i`` their targets, ``K`` = ``num_random``,
    ``T`` = ``temperature``, ``u_k ~ U[low, high]`` (density ``q_u = prod_j 1 / (high_j - low_j)``),
    ``a~_k ~ pi(.|s_t)`` and ``a~'_k ~ pi(.|s_{t+1})`` (drawn without gradient)::

        c_i(s_t)  = T logsumexp_{3K}([Q_i(s_t, u_k) - log q_u,
                                      Q_i(s_t, a~_k) - log pi(a~_k|s_t),
                                      Q_i(s_t, a~'_k) - log pi(a~'_k|s_{t+1})] / T)
                    - Q_i(s_t, a_t)
        loss_cql  = min_q_weight sum_i E[c_i]
        y_t       = r_t + gamma (1 - m_t) min_i Q'_i(s_{t+1}, a~')   (deterministic backup)
        loss_qvalue, loss_actor, loss_alpha: SACLoss's

    The log-sum-exp is an importance-sampled estimate of ``log sum_a exp Q(s, a)`` (the
    uniform density and the policy density divided out), pushed down while the
    dataset action's value is pushed up. With ``with_lagrange`` a multiplier
    ``alpha' = exp(log_alpha_prime)`` (clamped to ``[0, 1e6]``) scales the penalty::

        loss_cql         = alpha' (min_q_weight sum_i E[c_i] - 2 lagrange_thresh)
        loss_alpha_prime = -alpha' (min_q_weight mean_i E[c_i] - lagrange_thresh)

    each with the other's variable detached, so ``alpha'`` grows while the gap exceeds
    ``lagrange_thresh``. ``max_q_backup`` takes ``max_k min_i Q'_i(s_{t+1}, a~'_k)``
    (``K`` next actions) as the backup; ``deterministic_backup=False`` subtracts
    ``alpha log pi(a~'|s_{t+1})`` as SAC does. The uniform actions fill the ``action_spec``'s
    box when one is given, else ``[-1, 1]`` (TorchRL's: a tanh-squashed actor). ``loss_actor_bc``
    (``alpha log pi(a~|s) - log pi(a_t|s)``, with its gradient to the actor, as TorchRL's)
    is the behaviour-cloning warm start TorchRL's CQL script trains on for its first
    steps in place of ``loss_actor``; an update step that sums every ``loss_*`` entry
    trains on both, so leave it out there (``make_update_step(loss_keys=...)``).

    Args:
        actor_network: a probabilistic tensordict module whose distribution has
            ``rsample`` and actions in ``[-1, 1]``.
        qvalue_network: the critics' template (two critics, as TorchRL's CQL).
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"``.
        gamma: discount.
        temperature: ``T`` of the log-sum-exp (``> 0``).
        min_q_weight: weight of the conservative penalty (``>= 0``).
        max_q_backup: back up the max over ``num_random`` next actions.
        deterministic_backup: leave the entropy term out of the critics' target.
        num_random: ``K``, actions drawn per source (``>= 1``).
        with_lagrange: learn ``alpha'`` (``log_alpha_prime``) by dual gradient descent.
        lagrange_thresh: the gap target of the multiplier.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` for the per-sample terms.
        **sac_options: TorchRL's CQL keywords that are :class:`SACLoss`'s, with its
            meaning and defaults: ``alpha_init`` (1.0), ``min_alpha``, ``max_alpha``,
            ``action_spec`` (also the box of the uniform actions), ``fixed_alpha``,
            ``target_entropy`` (``"auto"``), ``delay_actor`` (``False``),
            ``delay_qvalue`` (``True``).

    Raises:
        TypeError: a network is not a tensordict module, the actor not probabilistic, or
            an unknown keyword.
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
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.rand(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> loss = CQLLoss(actor, qvalue, with_lagrange=True, lagrange_thresh=5.0)
        >>> sorted(loss(td).keys())  # doctest: +NORMALIZE_WHITESPACE
        ['alpha', 'entropy', 'loss_actor', 'loss_actor_bc', 'loss_alpha', 'loss_alpha_prime',
         'loss_cql', 'loss_qvalue']
    """

    # SACLoss's per-part methods would compute SAC's terms, not this loss's
    qvalue_v2_loss, actor_loss = not_a_part("qvalue_v2_loss"), not_a_part("actor_loss")
    alpha_loss, value_loss = not_a_part("alpha_loss"), not_a_part("value_loss")

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        loss_function: str = "smooth_l1",
        gamma: float = 0.99,
        temperature: float = 1.0,
        min_q_weight: float = 1.0,
        max_q_backup: bool = False,
        deterministic_backup: bool = True,
        num_random: int = 10,
        with_lagrange: bool = False,
        lagrange_thresh: float = 0.0,
        reduction: str | None = None,
        **sac_options: Any,
    ) -> None:
        unknown = sorted(set(sac_options) - set(_SAC_OPTIONS))
        if unknown:
            raise TypeError(f"CQLLoss: got unexpected keyword arguments {unknown}; SACLoss's "
                            f"options it takes are {list(_SAC_OPTIONS)}")
        super().__init__(actor_network, qvalue_network, num_qvalue_nets=2,
                         loss_function=loss_function, gamma=gamma,
                         **{"delay_actor": False, **sac_options})
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if not min_q_weight >= 0:
            raise ValueError(f"min_q_weight must be >= 0, got {min_q_weight!r}")
        if not isinstance(num_random, int) or num_random < 1:
            raise ValueError(f"num_random must be an int >= 1, got {num_random!r}")
        self.temperature, self.min_q_weight = float(temperature), float(min_q_weight)
        self.max_q_backup, self.deterministic_backup = max_q_backup, deterministic_backup
        self.num_random, self.with_lagrange = num_random, with_lagrange
        self.lagrange_thresh = float(lagrange_thresh)
        self.reduction = check_reduction(reduction)
        if with_lagrange:
            self.log_alpha_prime = nn.Parameter(torch.tensor(0.0))
        low, high = _uniform_bounds(sac_options.get("action_spec"))
        self.register_buffer("uniform_low", low)
        self.register_buffer("uniform_high", high)

    def _sample_many(self, tensordict: TensorDictBase, num: int):
        """``num`` actions per state and their log-probabilities: ``[K, *B, A]``, ``[K, *B]``."""
        actor = self.actor_network
        dist = actor.get_dist(tensordict.select(*actor.in_keys, strict=False))
        action = dist.rsample((num,))
        log_prob = dist.log_prob(action)
        if log_prob.ndim > tensordict.batch_dims + 1:
            log_prob = log_prob.flatten(tensordict.batch_dims + 1).sum(-1)
        return action, log_prob

    def _qvalues_many(self, tensordict: TensorDictBase, action: torch.Tensor,
                      params) -> torch.Tensor:
        """``Q_i(s, a_k)`` for ``K`` actions per state: ``[N, K, *B]``."""
        td = tensordict.select(*self._qvalue_template.in_keys, strict=False)
        return self._qvalues(td.expand(action.shape[0], *td.batch_size), action, params)

    @torch.no_grad()
    def _next_value(self, nxt: TensorDictBase, alpha: torch.Tensor) -> torch.Tensor:
        params = self._target_params()
        if self.max_q_backup:
            action, _ = self._sample_many(nxt, self.num_random)
            return self._qvalues_many(nxt, action, params).amin(0).amax(0)
        actor = self.target_actor_network if self.delay_actor else self.actor_network
        action, log_prob = self._sample(actor, nxt)
        value = self._qvalues(nxt, action, params).amin(0)
        return value if self.deterministic_backup else value - alpha * log_prob

    def _conservative_gap(self, td: TensorDictBase, nxt: TensorDictBase,
                          pred: torch.Tensor) -> torch.Tensor:
        """``sum_i c_i(s)`` per sample, ``[*B]``; gradient to the critics only."""
        num, params = self.num_random, self.qvalue_network_params
        with torch.no_grad():
            act_now, logp_now = self._sample_many(td, num)
            act_next, logp_next = self._sample_many(nxt, num)
            low, high = self.uniform_low.to(act_now), self.uniform_high.to(act_now)
            uniform = low + (high - low) * torch.rand_like(act_now)
        log_uniform = -(high - low).log().expand(act_now.shape[td.batch_dims + 1:]).sum()
        cat = torch.cat([
            self._qvalues_many(td, uniform, params) - log_uniform,
            self._qvalues_many(td, act_now, params) - logp_now,
            self._qvalues_many(td, act_next, params) - logp_next,
        ], dim=1)  # [N, 3K, *B]
        temp = self.temperature
        return (temp * torch.logsumexp(cat / temp, dim=1) - pred).sum(0)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the CQL terms; write ``td_error`` into ``tensordict``.

        Args:
            tensordict: ``[*B]`` with the observation, the dataset ``action`` and
                ``"next"`` (observation, ``reward``, ``done``, ``terminated``).

        Returns:
            ``loss_actor``, ``loss_actor_bc``, ``loss_qvalue``, ``loss_cql``,
            ``loss_alpha``, ``loss_alpha_prime`` (zero without Lagrange), ``alpha``,
            ``entropy``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        keys, td = self.tensor_keys, tensordict.copy()
        data_action = self._get(td, keys.action)
        if self._target_entropy is None:
            self._target_entropy = -float(math.prod(data_action.shape[td.batch_dims:]))
        alpha = self.alpha
        nxt, reward, terminated = reward_terminated(self, td)
        target = td0_return_estimate(self.gamma, self._next_value(nxt, alpha), reward,
                                     terminated)
        pred = self._qvalues(td, data_action, self.qvalue_network_params)
        tensordict.set(keys.priority, (pred.detach() - target).abs().amax(0))
        loss_q = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        out = {"loss_qvalue": reduce(loss_q, self.reduction)}
        out.update(self._cql_terms(self.min_q_weight * self._conservative_gap(td, nxt, pred)))
        action, log_prob = self._sample(self.actor_network, td)
        q = self._qvalues(td, action, self.qvalue_network_params.detach()).amin(0)
        out["loss_actor"] = reduce(alpha * log_prob - q, self.reduction)
        out["loss_actor_bc"] = reduce(self._bc(td, alpha * log_prob), self.reduction)
        out["loss_alpha"] = -(self.log_alpha * (log_prob.detach() + self._target_entropy)).mean()
        out["alpha"], out["entropy"] = alpha, -log_prob.detach().mean()
        return TensorDict(out, batch_size=[])

    def _cql_terms(self, gap: torch.Tensor) -> dict[str, torch.Tensor]:
        """``loss_cql`` and ``loss_alpha_prime`` from the weighted per-sample gap ``[*B]``."""
        if not self.with_lagrange:
            return {"loss_cql": reduce(gap, self.reduction),
                    "loss_alpha_prime": torch.zeros((), device=gap.device)}
        alpha_prime = self.log_alpha_prime.exp().clamp(0.0, _MAX_ALPHA_PRIME)
        thresh = self.num_qvalue_nets * self.lagrange_thresh
        return {
            "loss_cql": reduce(alpha_prime.detach() * (gap - thresh), self.reduction),
            "loss_alpha_prime": -alpha_prime * (gap.detach().mean() - thresh)
            / self.num_qvalue_nets,
        }

    def _bc(self, td: TensorDictBase, alpha_log_prob: torch.Tensor) -> torch.Tensor:
        actor = self.actor_network
        dist = actor.get_dist(td.select(*actor.in_keys, strict=False))
        bc_log_prob = dist.log_prob(self._get(td, self.tensor_keys.action))
        if bc_log_prob.ndim > td.batch_dims:
            bc_log_prob = bc_log_prob.flatten(td.batch_dims).sum(-1)
        return alpha_log_prob - bc_log_prob

    def actor_bc_loss(self, tensordict: TensorDictBase) -> torch.Tensor:
        """Behaviour-cloning actor loss ``E[alpha log pi(a~|s) - log pi(a_t|s)]`` (warm start).

        Args:
            tensordict: ``[*B]`` with the observation and the dataset ``action``.

        Returns:
            The scalar loss, with gradient to the actor.
        """
        _, log_prob = self._sample(self.actor_network, tensordict)
        return self._bc(tensordict, self.alpha * log_prob).mean()
