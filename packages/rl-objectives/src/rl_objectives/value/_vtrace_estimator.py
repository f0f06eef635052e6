"""``VTrace``: the V-trace estimator module (TorchRL's ``VTrace``, IMPALA's targets)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

from rl_objectives import _keys
from rl_objectives._tensor_keys import get_key
from rl_objectives.value._estimator_base import ValueEstimatorBase
from rl_objectives.value._vtrace import vtrace_advantage_estimate

__all__ = ["VTrace"]


class VTrace(ValueEstimatorBase):
    """V-trace off-policy targets (Espeholt et al., 2018, arXiv:1802.01561).

    ``log mu`` is the behaviour policy's ``sample_log_prob`` stored in the rollout;
    ``log pi`` is the learner's, from ``actor_network.get_dist(td).log_prob(action)``
    (without gradient). See :func:`~rl_objectives.value.functional.vtrace_advantage_estimate`
    for the equations.

    Args:
        gamma: discount.
        actor_network: the learner's policy, a probabilistic module with ``get_dist``.
        value_network: the critic, run on the root and on ``"next"``; or ``None``.
        rho_thresh: ``rho_bar``, the clip of the importance weights.
        c_thresh: ``c_bar``, the clip of the trace coefficients.
        average_adv: standardise the advantage over the whole batch.
        **kwargs: ``differentiable``, ``skip_existing``, ``time_dim``, ``shifted``.

    Raises:
        TypeError: ``actor_network`` has no ``get_dist``.
        ValueError: a threshold is not positive.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, ProbabilisticTensorDictModule
        >>> from tensordict.nn import ProbabilisticTensorDictSequential as Seq, TensorDictModule
        >>> actor = Seq(TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2),
        ...     NormalParamExtractor()), ["observation"], ["loc", "scale"]),
        ...     ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
        ...     distribution_class=torch.distributions.Normal))
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict({"observation": torch.randn(4, 10, 3),
        ...     "action": torch.randn(4, 10, 1), "sample_log_prob": torch.randn(4, 10, 1),
        ...     "next": {"observation": torch.randn(4, 10, 3), "reward": torch.randn(4, 10, 1),
        ...     "done": torch.zeros(4, 10, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(4, 10, 1, dtype=torch.bool)}}, [4, 10])
        >>> est = VTrace(gamma=0.99, actor_network=actor, value_network=critic)
        >>> est(td)["advantage"].shape
        torch.Size([4, 10, 1])
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase | None = None,
        rho_thresh: float = 1.0,
        c_thresh: float = 1.0,
        average_adv: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, value_network=value_network, **kwargs)
        if not hasattr(actor_network, "get_dist"):
            raise TypeError(
                f"actor_network: expected a probabilistic module with get_dist(tensordict), "
                f"received {type(actor_network).__name__}"
            )
        for name, value in (("rho_thresh", rho_thresh), ("c_thresh", c_thresh)):
            if not value > 0:
                raise ValueError(f"{name}: expected a positive float, received {value!r}")
        self.actor_network = actor_network
        self.rho_thresh, self.c_thresh = float(rho_thresh), float(c_thresh)
        self.average_adv = average_adv

    def _inputs(self, tensordict: TensorDictBase) -> dict[str, torch.Tensor]:
        inputs = super()._inputs(tensordict)
        owner = type(self).__name__
        log_mu = get_key(tensordict, self.tensor_keys.sample_log_prob, owner).detach()
        with torch.no_grad():
            dist = self.actor_network.get_dist(tensordict.copy())
            log_pi = dist.log_prob(get_key(tensordict, _keys.ACTION, owner))
        inputs["log_pi"] = log_pi.reshape(log_mu.shape)
        inputs["log_mu"] = log_mu
        return inputs

    def _estimate(self, inputs: dict[str, torch.Tensor], time_dim: int):
        reward = inputs["reward"]
        advantage, target = vtrace_advantage_estimate(
            self.gamma, inputs["log_pi"].reshape(reward.shape),
            inputs["log_mu"].reshape(reward.shape), inputs["state_value"],
            inputs["next_state_value"], reward, inputs["done"], inputs["terminated"],
            self.rho_thresh, self.c_thresh, time_dim=time_dim,
        )  # fmt: skip
        if self.average_adv:
            advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)
        return advantage, target
