"""Policy and critic together (TorchRL names and meaning): ``ActorValueOperator`` (a shared
trunk, two heads) and ``ActorCriticWrapper`` (two separate networks).

Both run policy and critic in one call (``forward``) and hand each out alone:
``get_policy_operator()`` for the collector and the loss's actor (probabilistic when the
policy head is, so that ``get_dist`` works), ``get_value_operator()`` for the critic and
the advantage estimator. The parts share their parameters with the whole.
"""

from __future__ import annotations

from typing import Any

from tensordict.nn import (
    ProbabilisticTensorDictSequential,
    TensorDictModuleBase,
    TensorDictSequential,
)

__all__ = ["ActorCriticWrapper", "ActorValueOperator"]


def _chain(first: TensorDictModuleBase, head: TensorDictModuleBase) -> TensorDictSequential:
    """``first`` then ``head``; probabilistic (``get_dist``) when ``head`` is."""
    if isinstance(head, ProbabilisticTensorDictSequential):
        return ProbabilisticTensorDictSequential(first, *head.module)
    return TensorDictSequential(first, head)


def _check(name: str, module: Any) -> None:
    if not isinstance(module, TensorDictModuleBase):
        raise TypeError(
            f"{name}: expected a tensordict.nn module, received {type(module).__name__}"
        )


class ActorValueOperator(TensorDictSequential):
    """A shared trunk (``common_operator``) feeding a policy head and a value head.

    Args:
        common_operator: writes the hidden features both heads read (e.g. a Nature CNN
            writing ``"hidden"``).
        policy_operator: the policy head (e.g. a ``ProbabilisticActor`` reading
            ``"hidden"``).
        value_operator: the value head (e.g. a ``ValueOperator`` reading ``"hidden"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl_modules import ProbabilisticActor, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(4, 8), ["observation"], ["hidden"])
        >>> head = TensorDictModule(torch.nn.Linear(8, 2), ["hidden"], ["logits"])
        >>> policy = ProbabilisticActor(head, ["logits"],
        ...     distribution_class=torch.distributions.Categorical, return_log_prob=True)
        >>> value = ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"])
        >>> model = ActorValueOperator(trunk, policy, value)
        >>> td = model(TensorDict(observation=torch.randn(3, 4), batch_size=[3]))
        >>> sorted(k for k in td.keys() if k != "observation")
        ['action', 'hidden', 'logits', 'sample_log_prob', 'state_value']
        >>> hasattr(model.get_policy_operator(), "get_dist")
        True
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ) -> None:
        for name, m in (("common_operator", common_operator), ("policy_operator", policy_operator),
                        ("value_operator", value_operator)):
            _check(name, m)
        super().__init__(common_operator, policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictSequential:
        """Trunk then policy head (shares their parameters)."""
        return _chain(self.module[0], self.module[1])

    def get_value_operator(self) -> TensorDictSequential:
        """Trunk then value head (shares their parameters)."""
        return _chain(self.module[0], self.module[2])

    def get_policy_head(self) -> TensorDictModuleBase:
        return self.module[1]

    def get_value_head(self) -> TensorDictModuleBase:
        return self.module[2]


class ActorCriticWrapper(TensorDictSequential):
    """A policy and a critic with no shared parameters, run in one call.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_modules import Actor, ValueOperator
        >>> both = ActorCriticWrapper(Actor(torch.nn.Linear(4, 2)),
        ...                           ValueOperator(torch.nn.Linear(4, 1)))
        >>> td = both(TensorDict(observation=torch.randn(3, 4), batch_size=[3]))
        >>> td["action"].shape, td["state_value"].shape
        (torch.Size([3, 2]), torch.Size([3, 1]))
    """

    def __init__(
        self, policy_operator: TensorDictModuleBase, value_operator: TensorDictModuleBase
    ) -> None:
        _check("policy_operator", policy_operator)
        _check("value_operator", value_operator)
        super().__init__(policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictModuleBase:
        return self.module[0]

    def get_value_operator(self) -> TensorDictModuleBase:
        return self.module[1]

    get_policy_head = get_policy_operator
    get_value_head = get_value_operator
