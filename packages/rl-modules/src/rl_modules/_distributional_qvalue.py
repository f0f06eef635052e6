"""Distributional (C51) value-based policies (Bellemare et al., 2017, arXiv:1707.06887).

The network outputs, per action ``a``, log-probabilities over the ``N`` atoms
``z_1 < ... < z_N`` of the ``support``: ``log p(s) [*B, N, n_actions]`` (atoms on dim -2,
TorchRL's layout). The action value is the distribution's mean and the policy is greedy::

    Q(s, a) = sum_j z_j p_j(s, a),       action = argmax_a Q(s, a)

``DistributionalDQNLoss`` (rl-objectives) reads the support from the actor's ``support``.

Several discrete choices per step (TorchRL's ``"mult-one-hot"`` and ``"binary"`` action
spaces) are *factorised*: each choice ``k`` owns a block of the last dim, with its own
distributions, and is chosen greedily inside its block (``action_blocks``):

- ``"mult-one-hot"``: ``var_nums`` choices ``[n_1, ..., n_K]``, blocks of ``n_k`` columns;
  the action is the blocks' one-hot vectors concatenated, ``[*B, sum n_k]``.
- ``"binary"``: ``n`` bits, each a block of 2 columns (the distributions of the bit at 0
  and at 1, in that order); the action is the bits, ``[*B, n]``. TorchRL documents this
  space but its module raises ``NotImplementedError`` on it; this is our reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import Binary, Composite
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn

from rl_modules._qvalue import _action_space
from rl_modules._spec_guard import event_spec
from rl_modules.exceptions import ActionSpecError

__all__ = ["DistributionalQValueActor", "DistributionalQValueModule"]


_MULTI = {"mult-one-hot": "mult-one-hot", "mult_one_hot": "mult-one-hot",
          "multi-one-hot": "mult-one-hot", "binary": "binary"}


def _space_and_blocks(action_space: str | None, spec: Any,
                      var_nums: Any) -> tuple[str, list[int] | None]:
    """The action space and, for several choices, each choice's number of columns."""
    leaf = spec.get("action") if isinstance(spec, Composite) else spec
    if action_space is None and isinstance(leaf, Binary):
        action_space = "binary"
    space = _MULTI.get(action_space) if isinstance(action_space, str) else None
    if space is None:
        if var_nums is not None:
            raise ValueError(f"var_nums: only for action_space='mult-one-hot', received "
                             f"var_nums={var_nums!r} with action_space={action_space!r}")
        return _action_space(action_space, spec), None
    if space == "binary":
        if var_nums is not None or not isinstance(leaf, Binary):
            raise ValueError("action_space='binary': expected a Binary spec (its n bits) and "
                             f"no var_nums, received spec={leaf!r}, var_nums={var_nums!r}")
        return space, [2] * leaf.n
    nums = [var_nums] if isinstance(var_nums, int) else list(var_nums or [])
    if not nums or not all(isinstance(n, int) and n >= 2 for n in nums):
        raise ValueError("var_nums: expected each choice's cardinality (ints >= 2) for "
                         f"action_space='mult-one-hot', received {var_nums!r}")
    return space, nums


def _check_support(support: Any) -> torch.Tensor:
    support = torch.as_tensor(support, dtype=torch.get_default_dtype())
    if support.ndim != 1 or support.numel() < 2 or not bool((support.diff() > 0).all()):
        raise ValueError(
            "support: expected a 1-D increasing tensor of at least 2 atoms, received "
            f"shape {tuple(support.shape)}"
        )
    return support


class DistributionalQValueModule(TensorDictModuleBase):
    """Greedy action from per-atom log-probabilities; writes ``action`` and keeps
    ``action_value`` (the log-probabilities, ``[*B, N, n_actions]``).

    Args:
        action_space: ``"categorical"``, ``"one-hot"``, ``"mult-one-hot"`` or
            ``"binary"`` (module docstring); inferred from ``spec`` when ``None``
            (categorical without a spec).
        support: the atoms ``z`` ``[N]``, increasing (a buffer: moves with ``.to``).
        action_value_key: key of the log-probabilities.
        action_mask_key: a bool ``[*B, n_actions]`` key of allowed actions, or ``None``
            (one choice only).
        out_keys: ``[action, action_value]`` keys.
        var_nums: ``"mult-one-hot"``: each choice's cardinality (an int: one choice of that
            many; a list: one per choice).
        spec: the action spec (``Categorical``, ``OneHot``, or ``Binary`` for ``"binary"``).
        safe: accepted for TorchRL compatibility (the greedy action is always in the spec).

    Raises:
        ValueError: a bad ``support``, ``action_space`` or ``var_nums``, or an action mask
            with several choices.
        ActionSpecError: (at call) ``action_value``'s last dim differs from the choices'
            columns.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> logp = torch.log_softmax(torch.tensor([[[5.0, 0.0], [0.0, 5.0]]]), dim=-2)
        >>> m = DistributionalQValueModule(support=torch.tensor([-1.0, 1.0]))
        >>> m(TensorDict(action_value=logp, batch_size=[1]))["action"]
        tensor([1])
        >>> two = DistributionalQValueModule("mult-one-hot", torch.tensor([-1.0, 1.0]),
        ...                                  var_nums=[2, 3])  # choices of 2 and of 3
        >>> two(TensorDict(action_value=torch.zeros(4, 2, 5), batch_size=[4]))["action"].shape
        torch.Size([4, 5])
    """

    def __init__(
        self,
        action_space: str | None = None,
        support: Any = None,
        action_value_key: Any = "action_value",
        action_mask_key: Any = None,
        out_keys: Sequence[Any] | None = None,
        var_nums: int | None = None,
        spec: Any = None,
        safe: bool = False,
    ) -> None:
        super().__init__()
        if support is None:
            raise ValueError("support: expected the atoms of the value distribution, got None")
        self.action_space, self.var_nums = _space_and_blocks(action_space, spec, var_nums)
        if self.var_nums is not None and action_mask_key is not None:
            raise ValueError(f"action_mask_key: one choice only, received {action_mask_key!r} "
                             f"with action_space={self.action_space!r}")
        leaf = spec.get("action") if isinstance(spec, Composite) else spec
        self.spec = None if leaf is None else event_spec(leaf)
        self._dtype = self.spec.dtype if self.spec is not None else torch.int64
        self.register_buffer("support", _check_support(support))
        self.action_value_key, self.action_mask_key = action_value_key, action_mask_key
        self.in_keys = [action_value_key] + ([action_mask_key] if action_mask_key else [])
        self.out_keys = list(out_keys) if out_keys is not None else ["action", action_value_key]

    def expected_values(self, log_probs: torch.Tensor) -> torch.Tensor:
        """``Q = sum_j z_j p_j``: ``[*B, N, n_actions] -> [*B, n_actions]``."""
        return (log_probs.exp() * self.support.unsqueeze(-1)).sum(-2)

    @property
    def action_blocks(self) -> list[int] | None:
        """Each choice's columns of ``action_value`` (``None``: one choice, all columns)."""
        return self.var_nums

    def greedy_indices(self, log_probs: torch.Tensor) -> torch.Tensor:
        """Each choice's greedy column inside its block, ``[*B, K]`` (several choices)."""
        blocks = self.var_nums
        if log_probs.shape[-1] != sum(blocks):
            raise ActionSpecError(
                f"{self.action_value_key}: expected {sum(blocks)} columns ({blocks} for "
                f"action_space={self.action_space!r}), received shape {tuple(log_probs.shape)}")
        values = self.expected_values(log_probs).split(blocks, dim=-1)
        return torch.stack([v.argmax(-1) for v in values], -1)

    def _multi_action(self, log_probs: torch.Tensor) -> torch.Tensor:
        index = self.greedy_indices(log_probs)
        dtype = self.spec.dtype if self.spec is not None else torch.int64
        if self.action_space == "binary":
            return index.to(dtype)
        parts = [nn.functional.one_hot(index[..., k], n)
                 for k, n in enumerate(self.var_nums)]
        return torch.cat(parts, -1).to(dtype)

    @profiled("DistributionalQValueModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        log_probs = tensordict.get(self.action_value_key)
        if self.var_nums is not None:
            tensordict.set(self.out_keys[0], self._multi_action(log_probs))
            tensordict.set(self.out_keys[1], log_probs)
            return tensordict
        values = self.expected_values(log_probs)
        if self.action_mask_key is not None:
            values = values.masked_fill(~tensordict.get(self.action_mask_key), float("-inf"))
        index = values.argmax(-1, keepdim=True)
        if self.action_space == "one-hot":
            action = torch.zeros_like(values, dtype=self._dtype).scatter_(-1, index, 1)
        else:
            action = index.squeeze(-1).to(self._dtype)
        tensordict.set(self.out_keys[0], action)
        tensordict.set(self.out_keys[1], log_probs)
        return tensordict


class _LogSoftmaxAtoms(nn.Module):
    """``log_softmax`` over the atoms (dim -2) of a ``[*B, N, n_actions]`` output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x, dim=-2)


class DistributionalQValueActor(TensorDictSequential):
    """A C51 network followed by a ``DistributionalQValueModule``.

    The network maps the observation to ``[*B, N, n_actions]`` logits (e.g. an ``MLP``
    with ``out_features=(N, n_actions)``); with ``make_log_softmax`` they are turned into
    log-probabilities over the atoms before the greedy choice.

    Args:
        module: the network (``nn.Module`` or tensordict module writing
            ``action_value_key``).
        support: the atoms ``z`` ``[N]`` (kept as ``actor.support``).
        in_keys: keys read (default ``["observation"]``).
        spec: the action spec (``Categorical``, ``OneHot`` or ``Binary``).
        safe: accepted for TorchRL compatibility.
        var_nums: ``"mult-one-hot"``: each choice's cardinality (int or list).
        action_space: ``"categorical"``, ``"one-hot"``, ``"mult-one-hot"`` or ``"binary"``
            (inferred from ``spec``; TorchRL defaults to one-hot without a spec, this class
            to categorical as ``QValueActor`` does).
        action_value_key: where the log-probabilities are written.
        action_mask_key: a key of allowed actions, or ``None``.
        make_log_softmax: apply ``log_softmax`` over the atoms to the network's output.

    Examples:
        >>> import torch
        >>> from rl_modules import MLP
        >>> from tensordict import TensorDict
        >>> net = MLP(4, out_features=(11, 2), num_cells=8, depth=1)
        >>> actor = DistributionalQValueActor(net, support=torch.linspace(-10, 10, 11))
        >>> td = actor(TensorDict(observation=torch.randn(3, 4), batch_size=[3]))
        >>> td["action"].shape, td["action_value"].shape
        (torch.Size([3]), torch.Size([3, 11, 2]))
    """

    def __init__(
        self,
        module: Any,
        support: Any,
        in_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        safe: bool = False,
        var_nums: int | None = None,
        action_space: str | None = None,
        action_value_key: Any = "action_value",
        action_mask_key: Any = None,
        make_log_softmax: bool = True,
    ) -> None:
        in_keys = ["observation"] if in_keys is None else list(in_keys)
        if not isinstance(module, TensorDictModuleBase):
            if make_log_softmax:
                module = nn.Sequential(module, _LogSoftmaxAtoms())
            module = TensorDictModule(module, in_keys, [action_value_key])
        elif make_log_softmax:
            module = TensorDictSequential(module, TensorDictModule(
                _LogSoftmaxAtoms(), [action_value_key], [action_value_key]))
        head = DistributionalQValueModule(
            action_space, support, action_value_key, action_mask_key,
            var_nums=var_nums, spec=spec, safe=safe,
        )
        super().__init__(module, head)

    @property
    def support(self) -> torch.Tensor:
        """The atoms ``z`` ``[N]``."""
        return self.module[-1].support

    @property
    def spec(self) -> Any:
        return self.module[-1].spec

    @property
    def action_space(self) -> str:
        """The head's action space."""
        return self.module[-1].action_space

    @property
    def action_blocks(self) -> list[int] | None:
        """The head's :attr:`DistributionalQValueModule.action_blocks`."""
        return self.module[-1].action_blocks
