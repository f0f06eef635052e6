"""Value-based policies (TorchRL names and meaning): ``QValueModule`` turns action values
into the greedy action; ``QValueActor`` puts a Q-network in front of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import Categorical, Composite, OneHot
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential

from rl_modules._spec_guard import event_spec

__all__ = ["QValueActor", "QValueModule"]

_SPACES = ("categorical", "one-hot")


def _action_space(action_space: str | None, spec: Any) -> str:
    """``"categorical"`` or ``"one-hot"``, from the argument or from the action spec."""
    if isinstance(spec, Composite):
        spec = spec.get("action")
    if action_space is None:
        if isinstance(spec, OneHot):
            return "one-hot"
        if spec is None or isinstance(spec, Categorical):
            return "categorical"
        raise ValueError(
            f"action_space: cannot be inferred from a {type(spec).__name__} spec; "
            f"expected a Categorical or OneHot spec, or action_space in {_SPACES}"
        )
    aliases = {"one_hot": "one-hot", "onehot": "one-hot", "discrete": "categorical"}
    space = aliases.get(action_space, action_space)
    if space not in _SPACES:
        raise ValueError(f"action_space: expected one of {_SPACES}, received {action_space!r}")
    return space


class QValueModule(TensorDictModuleBase):
    """Greedy action from action values: writes ``action``, ``action_value`` and
    ``chosen_action_value``.

    ``action = argmax_a Q(s, a)`` (an index for ``"categorical"``, a one-hot vector for
    ``"one-hot"``, in the spec's dtype), ``chosen_action_value = max_a Q(s, a)`` with the
    trailing singleton dim TorchRL keeps. With ``action_mask_key``, masked actions are
    never chosen.

    Args:
        action_space: ``"categorical"`` or ``"one-hot"``; inferred from ``spec`` when
            ``None`` (categorical without a spec).
        action_value_key: the key of the action values ``[*B, n]``.
        out_keys: ``[action, action_value, chosen_action_value]`` keys.
        spec: the action spec (``Categorical`` or ``OneHot``, batched or not).
        action_mask_key: a bool ``[*B, n]`` key of allowed actions, or ``None``.

    Raises:
        ValueError: an unknown ``action_space``, or one that the spec contradicts.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(action_value=torch.tensor([[0.1, 2.0, 0.3]]), batch_size=[1])
        >>> out = QValueModule()(td)
        >>> out["action"], out["chosen_action_value"]
        (tensor([1]), tensor([[2.]]))
    """

    def __init__(
        self,
        action_space: str | None = None,
        action_value_key: Any = "action_value",
        out_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        action_mask_key: Any = None,
    ) -> None:
        super().__init__()
        self.action_space = _action_space(action_space, spec)
        leaf = spec.get("action") if isinstance(spec, Composite) else spec
        if leaf is not None and not isinstance(leaf, (Categorical, OneHot)):
            raise ValueError(
                f"spec: expected a Categorical or OneHot action spec, received {leaf!r}"
            )
        self.spec = None if leaf is None else event_spec(leaf)
        if out_keys is None:
            out_keys = ["action", action_value_key, "chosen_action_value"]
        self.action_value_key, self.action_mask_key = action_value_key, action_mask_key
        self.in_keys = [action_value_key] + (
            [action_mask_key] if action_mask_key is not None else []
        )
        self.out_keys = list(out_keys)
        self._dtype = self.spec.dtype if self.spec is not None else torch.int64

    @profiled("QValueModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        values = tensordict.get(self.action_value_key)
        if self.action_mask_key is not None:
            mask = tensordict.get(self.action_mask_key)
            values = values.masked_fill(~mask, float("-inf"))
        chosen, index = values.max(-1, keepdim=True)
        if self.action_space == "one-hot":
            action = torch.zeros_like(values, dtype=self._dtype).scatter_(-1, index, 1)
        else:
            action = index.squeeze(-1).to(self._dtype)
        key_action, key_value, key_chosen = self.out_keys
        tensordict.set(key_action, action)
        tensordict.set(key_value, values)
        tensordict.set(key_chosen, chosen)
        return tensordict


class QValueActor(TensorDictSequential):
    """A Q-network followed by a ``QValueModule``: ``observation -> action``.

    DQNLoss takes it as its ``value_network`` unchanged (it reads ``action_value``).

    Args:
        module: the Q-network (``nn.Module`` or tensordict module) writing action values.
        in_keys: keys it reads (default ``["observation"]``).
        spec: the action spec (``Categorical`` or ``OneHot``).
        action_space: ``"categorical"`` or ``"one-hot"`` (inferred from ``spec``).
        action_value_key: where the network writes its values.
        action_mask_key: a key of allowed actions, or ``None``.

    Examples:
        >>> import torch
        >>> from rl_envs import Categorical
        >>> from tensordict import TensorDict
        >>> actor = QValueActor(torch.nn.Linear(4, 2), spec=Categorical(2, shape=(8,)))
        >>> td = actor(TensorDict(observation=torch.randn(8, 4), batch_size=[8]))
        >>> td["action"].shape, td["action_value"].shape, td["chosen_action_value"].shape
        (torch.Size([8]), torch.Size([8, 2]), torch.Size([8, 1]))
    """

    def __init__(
        self,
        module: Any,
        in_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        action_space: str | None = None,
        action_value_key: Any = "action_value",
        action_mask_key: Any = None,
    ) -> None:
        in_keys = ["observation"] if in_keys is None else list(in_keys)
        if not isinstance(module, TensorDictModuleBase):
            module = TensorDictModule(module, in_keys, [action_value_key])
        qvalue = QValueModule(
            action_space, action_value_key, spec=spec, action_mask_key=action_mask_key
        )
        super().__init__(module, qvalue)

    @property
    def spec(self) -> Any:
        return self.module[-1].spec

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        if args or kwargs:
            return super().forward(tensordict, *args, **kwargs)
        # the network, then the greedy choice: two calls, without the sequence's key plumbing
        return self.module[1](self.module[0](tensordict))
