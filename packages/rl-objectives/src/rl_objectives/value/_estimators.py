"""The estimator modules: TD(0), TD(1), TD(lambda), GAE and multi-agent GAE."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives.value._estimator_base import ValueEstimatorBase
from rl_objectives.value._gae import vec_generalized_advantage_estimate
from rl_objectives.value._td import td0_return_estimate, vec_td_lambda_return_estimate

__all__ = ["GAE", "MultiAgentGAE", "TD0Estimator", "TD1Estimator", "TDLambdaEstimator"]


class TD0Estimator(ValueEstimatorBase):
    """One-step target ``G_t = r_t + gamma (1 - m_t) V(s_{t+1})``; ``A_t = G_t - V(s_t)``.

    Args: as :class:`ValueEstimatorBase` (``gamma``, ``value_network``, ``differentiable``,
    ``skip_existing``, ``time_dim``, ``shifted``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(2, 1), "next": {
        ...     "state_value": torch.ones(2, 1), "reward": torch.ones(2, 1),
        ...     "done": torch.tensor([[False], [True]])}}, [2])
        >>> TD0Estimator(gamma=0.5)(td)["value_target"].squeeze(-1)
        tensor([1.5000, 1.0000])
    """

    def _estimate(self, inputs, time_dim):
        target = td0_return_estimate(
            self.gamma, inputs["next_state_value"], inputs["reward"], inputs["terminated"]
        )
        return target - inputs["state_value"], target


class TDLambdaEstimator(ValueEstimatorBase):
    """TD(lambda) target (see :func:`vec_td_lambda_return_estimate`); ``A = G - V``.

    Args:
        gamma: discount.
        lmbda: trace decay.
        value_network: as in :class:`ValueEstimatorBase`.
        **kwargs: ``differentiable``, ``skip_existing``, ``time_dim``, ``shifted``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"state_value": torch.zeros(3, 1), "next": {
        ...     "state_value": torch.zeros(3, 1), "reward": torch.ones(3, 1),
        ...     "done": torch.zeros(3, 1, dtype=torch.bool)}}, [3])
        >>> TDLambdaEstimator(gamma=0.5, lmbda=1.0)(td)["value_target"].squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000])
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        lmbda: float | torch.Tensor,
        value_network: TensorDictModuleBase | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, value_network=value_network, **kwargs)
        if not isinstance(lmbda, (float, int, torch.Tensor)) or isinstance(lmbda, bool):
            raise ValueError(f"lmbda must be a float or a tensor, got {type(lmbda).__name__}")
        self.lmbda = float(lmbda) if not isinstance(lmbda, torch.Tensor) else lmbda

    def _estimate(self, inputs, time_dim):
        target = vec_td_lambda_return_estimate(
            self.gamma, self.lmbda, inputs["next_state_value"], inputs["reward"],
            inputs["done"], inputs["terminated"], time_dim=time_dim,
        )
        return target - inputs["state_value"], target


class TD1Estimator(TDLambdaEstimator):
    """TD(1) target: the discounted return, bootstrapped at truncations and batch ends.

    Args:
        gamma: discount.
        value_network: as in :class:`ValueEstimatorBase`.
        **kwargs: ``differentiable``, ``skip_existing``, ``time_dim``, ``shifted``.

    Examples:
        >>> TD1Estimator(gamma=0.99).lmbda
        1.0
    """

    def __init__(
        self, *, gamma: float | torch.Tensor, value_network: TensorDictModuleBase | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, lmbda=1.0, value_network=value_network, **kwargs)


class GAE(TDLambdaEstimator):
    """Generalised advantage estimation (Schulman et al., 2016).

    ``A_t = delta_t + gamma lmbda (1 - d_t) A_{t+1}``, ``value_target = A + V``; see
    :func:`vec_generalized_advantage_estimate`.

    Args:
        gamma: discount.
        lmbda: trace decay.
        value_network: the critic, run on the root and on ``"next"``; or ``None``.
        average_gae: standardise the advantage over the whole batch.
        **kwargs: ``differentiable``, ``skip_existing``, ``time_dim``, ``shifted``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict({"observation": torch.randn(4, 10, 3), "next": {
        ...     "observation": torch.randn(4, 10, 3), "reward": torch.randn(4, 10, 1),
        ...     "done": torch.zeros(4, 10, 1, dtype=torch.bool),
        ...     "terminated": torch.zeros(4, 10, 1, dtype=torch.bool)}}, [4, 10])
        >>> GAE(gamma=0.99, lmbda=0.95, value_network=critic)(td)["advantage"].shape
        torch.Size([4, 10, 1])
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        lmbda: float | torch.Tensor,
        value_network: TensorDictModuleBase | None = None,
        average_gae: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(gamma=gamma, lmbda=lmbda, value_network=value_network, **kwargs)
        self.average_gae = average_gae

    def _estimate(self, inputs, time_dim):
        advantage, target = vec_generalized_advantage_estimate(
            self.gamma, self.lmbda, inputs["state_value"], inputs["next_state_value"],
            inputs["reward"], inputs["done"], inputs["terminated"], time_dim=time_dim,
        )
        if self.average_gae:
            advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(1e-6)
        return advantage, target


class MultiAgentGAE(GAE):
    """GAE whose values carry an agent dim: ``[*B, T, n_agents, 1]``, kept in the output.

    Shared ``reward``/``done``/``terminated`` of shape ``[*B, T, 1]`` are broadcast over
    the agents; per-agent ones (``[*B, T, n_agents, 1]``) are used as they are. Default
    keys put the value, advantage and value target under ``"agents"``.

    Args: as :class:`GAE`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"agents": {"state_value": torch.zeros(5, 3, 1)}, "next": {
        ...     "agents": {"state_value": torch.zeros(5, 3, 1)}, "reward": torch.ones(5, 1),
        ...     "done": torch.zeros(5, 1, dtype=torch.bool)}}, [5])
        >>> MultiAgentGAE(gamma=0.9, lmbda=0.9)(td)["agents", "advantage"].shape
        torch.Size([5, 3, 1])
    """

    @dataclasses.dataclass
    class _AcceptedKeys(ValueEstimatorBase._AcceptedKeys):
        """Key roles; value, advantage and value target default under ``"agents"``."""

        advantage: NestedKey = ("agents", "advantage")
        value_target: NestedKey = ("agents", "value_target")
        value: NestedKey = ("agents", "state_value")

    def _inputs(self, tensordict):
        inputs = super()._inputs(tensordict)
        value = inputs["state_value"]
        for name in ("reward", "done", "terminated"):
            x = inputs[name]
            if x.ndim == value.ndim - 1:
                inputs[name] = x.unsqueeze(-2).expand(value.shape)
        return inputs
