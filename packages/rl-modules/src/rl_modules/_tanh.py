"""Squashing to a box (TorchRL names and meaning): the ``TanhDelta`` distribution of a
deterministic policy and the ``TanhModule`` that squashes keys of a TensorDict.

Both map an unbounded ``x`` into ``[low, high]`` with

    y = low + (high - low) (tanh(x) + 1) / 2

so ``x = 0`` lands on the box's centre (Fujimoto et al., 2018, arXiv:1802.09477, use the
same squashed deterministic actor for TD3; Lillicrap et al., 2016, arXiv:1509.02971, for
DDPG).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import Bounded, Composite
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import distributions as D

from rl_modules._spec_guard import event_spec

__all__ = ["TanhDelta", "TanhModule"]


def squash(x: torch.Tensor, low: Any, high: Any) -> torch.Tensor:
    """``low + (high - low) (tanh(x) + 1) / 2``, element-wise (bounds broadcast)."""
    return low + (high - low) * (torch.tanh(x) + 1.0) / 2.0


class TanhDelta(D.Distribution):
    """A Dirac mass at ``squash(param)``: the "distribution" of a deterministic policy.

    ``sample`` and ``rsample`` return the squashed parameter (``rsample`` keeps its
    gradient); ``log_prob(value)`` is 0 where ``value`` equals it (within ``atol`` /
    ``rtol``) and ``-inf`` elsewhere, summed over the last ``event_dims`` dims.

    Args:
        param: the unbounded parameter ``[*B, *event]``.
        low: lower bound (float or tensor broadcastable to ``param``).
        high: upper bound.
        event_dims: trailing dims that form one event.
        atol: absolute tolerance of ``log_prob``'s equality test.
        rtol: relative tolerance of ``log_prob``'s equality test.

    Raises:
        ValueError: ``low >= high`` somewhere, or ``event_dims`` exceeds ``param``'s dims.

    Examples:
        >>> import torch
        >>> d = TanhDelta(torch.zeros(4, 2), low=-2.0, high=2.0)
        >>> d.sample()[0], d.log_prob(d.sample()).shape
        (tensor([0., 0.]), torch.Size([4]))
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        param: torch.Tensor,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        event_dims: int = 1,
        atol: float = 1e-6,
        rtol: float = 1e-6,
    ) -> None:
        low_t, high_t = torch.as_tensor(low), torch.as_tensor(high)
        if not bool((low_t < high_t).all()):
            raise ValueError(f"low must be < high everywhere, got low={low}, high={high}")
        if not 0 <= event_dims <= param.ndim:
            raise ValueError(
                f"event_dims must be in [0, param.ndim={param.ndim}], got {event_dims}"
            )
        self.param, self.low, self.high = param, low, high
        self.event_dims, self.atol, self.rtol = event_dims, atol, rtol
        self._value = squash(param, low, high)
        split = param.ndim - event_dims
        super().__init__(param.shape[:split], param.shape[split:], validate_args=False)

    @property
    def mode(self) -> torch.Tensor:
        """The squashed parameter."""
        return self._value

    @property
    def mean(self) -> torch.Tensor:
        """The squashed parameter."""
        return self._value

    @property
    def deterministic_sample(self) -> torch.Tensor:
        """The squashed parameter (TorchRL's name for the deterministic action)."""
        return self._value

    def rsample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        return self._value.expand(*sample_shape, *self._value.shape)

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape).clone()

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        close = torch.isclose(value, self._value.expand_as(value), atol=self.atol, rtol=self.rtol)
        lp = torch.zeros_like(value).masked_fill(~close, float("-inf"))
        return lp.sum(tuple(range(-self.event_dims, 0))) if self.event_dims else lp

    def entropy(self) -> torch.Tensor:
        return torch.zeros(self.batch_shape, device=self._value.device)


def _bounds(spec: Any, low: Any, high: Any) -> tuple[Any, Any]:
    if spec is not None:
        if low is not None or high is not None:
            raise ValueError("give spec or low/high, not both")
        leaf = spec.get("action") if isinstance(spec, Composite) else spec
        if not isinstance(leaf, Bounded):
            raise ValueError(f"spec: expected a Bounded spec, received {type(leaf).__name__}")
        leaf = event_spec(leaf)  # an env's batched spec: one env's bounds
        return leaf.low, leaf.high
    low = -1.0 if low is None else low
    high = 1.0 if high is None else high
    if not bool((torch.as_tensor(low) < torch.as_tensor(high)).all()):
        raise ValueError(f"low must be < high everywhere, got low={low}, high={high}")
    return low, high


class TanhModule(TensorDictModuleBase):
    """Squash ``in_keys`` into a box: ``y = low + (high - low) (tanh(x) + 1) / 2``.

    Args:
        in_keys: keys to squash.
        out_keys: where to write them (default: overwrite ``in_keys``).
        spec: a ``Bounded`` spec (or a ``Composite`` with ``"action"``) giving the bounds
            (an env's batched spec is fine: bounds broadcast over the batch).
        low: lower bound when no ``spec`` (default -1).
        high: upper bound when no ``spec`` (default 1).
        clamp: clamp the output to ``[low + eps, high - eps]`` (``eps`` the dtype's
            resolution), so that ``atanh`` of the rescaled output stays finite.

    Attributes:
        spec: TorchRL's: a ``Composite`` of the output spec under each out key (the
            ``Composite`` given), or ``None`` when built from ``low``/``high``.

    Raises:
        ValueError: mismatched key lists, a spec that is not ``Bounded``, ``spec`` with
            ``low``/``high``, or ``low >= high``.

    Examples:
        >>> import torch
        >>> from rl_envs import Bounded
        >>> from tensordict import TensorDict
        >>> m = TanhModule(["action"], spec=Bounded(-2.0, 2.0, shape=(1,)))
        >>> m(TensorDict(action=torch.tensor([[100.0], [0.0]]), batch_size=[2]))["action"]
        tensor([[2.],
                [0.]])
    """

    def __init__(
        self,
        in_keys: Sequence[Any],
        out_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        low: Any = None,
        high: Any = None,
        clamp: bool = False,
    ) -> None:
        super().__init__()
        in_keys = [in_keys] if isinstance(in_keys, str) else list(in_keys)
        out_keys = list(in_keys) if out_keys is None else (
            [out_keys] if isinstance(out_keys, str) else list(out_keys))
        if len(out_keys) != len(in_keys):
            raise ValueError(
                f"out_keys: expected {len(in_keys)} keys (one per in key), received {out_keys}"
            )
        self.in_keys, self.out_keys, self.clamp = in_keys, out_keys, clamp
        low, high = _bounds(spec, low, high)
        # TorchRL's attribute: the output spec per out key (None when built from low/high)
        self.spec = spec if spec is None or isinstance(spec, Composite) else Composite(
            {key: spec for key in out_keys})
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.get_default_dtype()))
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.get_default_dtype()))

    @profiled("TanhModule.forward")
    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for key_in, key_out in zip(self.in_keys, self.out_keys, strict=True):
            y = squash(tensordict.get(key_in), self.low, self.high)
            if self.clamp:
                eps = torch.finfo(y.dtype).resolution
                y = torch.maximum(torch.minimum(y, self.high - eps), self.low + eps)
            tensordict.set(key_out, y)
        return tensordict
