"""Continuous action distributions (TorchRL names and meaning): ``TanhNormal``,
``IndependentNormal`` and ``TruncatedNormal``.

All three treat the last dim of ``loc`` as the action's event dim: ``log_prob`` returns one
value per batch element, summed over the action's components, which is what the losses
of rl-objectives expect.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict.nn.distributions import TruncatedNormal as _TDTruncatedNormal
from torch import distributions as D

__all__ = ["IndependentNormal", "TanhNormal", "TruncatedNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)  # the same double as Normal.log_prob's constant
_LOG_2 = math.log(2.0)


def _squash_loc(loc: torch.Tensor, upscale: float, tanh_loc: bool) -> torch.Tensor:
    """``upscale * tanh(loc / upscale)`` when ``tanh_loc`` (keeps the mean in a bounded range)."""
    return upscale * torch.tanh(loc / upscale) if tanh_loc else loc


def _normal(loc: torch.Tensor, scale: Any) -> D.Normal:
    """``Normal(loc, scale)``. For a ``scale`` of ``loc``'s shape, without the op of
    ``broadcast_all`` (it would return views of the same tensors): built as torch's own
    ``Normal.expand`` builds one."""
    if not isinstance(scale, torch.Tensor) or scale.shape != loc.shape:
        return D.Normal(loc, scale, validate_args=False)
    normal = D.Normal.__new__(D.Normal)
    normal.loc, normal.scale = loc, scale
    D.Distribution.__init__(normal, loc.shape, validate_args=False)
    return normal


def _sum_rightmost(value: torch.Tensor, ndims: int) -> torch.Tensor:
    """Sum the last ``ndims`` dims as ``torch.distributions.Independent`` does (flattened
    first: the same reduction, so the same bits)."""
    if ndims == 0:
        return value
    return value.reshape(value.shape[: value.ndim - ndims] + (-1,)).sum(-1)


def _normal_log_prob(
    value: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor, ndims: int
) -> torch.Tensor:
    """``Normal.log_prob``'s float ops in fewer kernels (in place where it can), the sign
    taken once after the sum (negation is exact), summed over the last ``ndims`` dims."""
    sq = value - loc
    sq = sq.mul_(sq)  # d ** 2
    var2 = scale.square().mul_(2.0)
    lp = torch.addcdiv(scale.log(), sq, var2).add_(_HALF_LOG_2PI)
    return _sum_rightmost(lp, ndims).neg_()


def _bound(value: Any, like: torch.Tensor) -> float | torch.Tensor:
    """A Python float stays one (cheapest arithmetic); a tensor moves to ``like``'s device."""
    if isinstance(value, torch.Tensor):
        if value.numel() == 1:
            return float(value)
        return value.to(device=like.device, dtype=like.dtype)
    return float(value)


class TanhNormal(D.Distribution):
    """``low + (high - low) * (tanh(u) + 1) / 2`` with ``u ~ Normal(loc, scale)``.

    The squashed Gaussian of SAC (Haarnoja et al., 2018, appendix C), scaled to a
    ``Bounded`` action spec's ``[low, high]``. With ``y = tanh(u)`` and ``a = m + h y``
    (``m = (high + low) / 2``, ``h = (high - low) / 2``)::

        log p(a) = log N(u; loc, scale) - log(1 - tanh(u)^2) - log h

    summed over the event dims, with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``
    (exact, finite for any ``u``). ``log_prob`` of the sample just drawn reuses its ``u``;
    for any other value ``u = atanh(y)`` with ``y`` clamped one float step inside
    ``(-1, 1)``, so actions on or within ``1e-6`` of the bounds have a finite log-prob.

    Args:
        loc: mean of the Gaussian before squashing, ``[*batch, *event]``.
        scale: its standard deviation (positive), same shape.
        upscale: the bound of ``loc`` when ``tanh_loc``.
        low: lower bound of the action (a float or a tensor broadcastable to ``loc``).
        high: upper bound of the action.
        event_dims: trailing dims that form one action (default: 1, or 0 for a scalar
            ``loc``).
        tanh_loc: map ``loc`` to ``upscale * tanh(loc / upscale)`` first.
        safe_tanh: clamp ``tanh(u)`` one float step inside ``(-1, 1)``, so that a sample
            never sits exactly on a bound.

    Attributes:
        deterministic_sample: ``m + h tanh(loc)``, the action of a deterministic policy
            (``ExplorationType.DETERMINISTIC``); also returned by ``mode`` (it is the squash
            of the Gaussian's mode, not the exact mode of the squashed density).

    Examples:
        >>> import torch
        >>> d = TanhNormal(torch.zeros(4, 2), torch.ones(4, 2), low=-2.0, high=2.0)
        >>> a = d.rsample()
        >>> a.shape, d.log_prob(a).shape
        (torch.Size([4, 2]), torch.Size([4]))
        >>> bool((a.abs() < 2).all())
        True
        >>> d.deterministic_sample
        tensor([[0., 0.],
                [0., 0.],
                [0., 0.],
                [0., 0.]])
    """

    arg_constraints: dict = {}
    has_rsample = True

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        event_dims: int | None = None,
        tanh_loc: bool = False,
        safe_tanh: bool = True,
    ) -> None:
        self.loc = _squash_loc(loc, upscale, tanh_loc)
        self.scale = scale
        low, high = _bound(low, loc), _bound(high, loc)
        self._half = (high - low) / 2
        self._mid = (high + low) / 2
        self.low, self.high = low, high
        self._safe = safe_tanh
        self._last: tuple[torch.Tensor, ...] | None = None  # (sample, u, z) of rsample
        nd = (1 if loc.ndim else 0) if event_dims is None else int(event_dims)
        cut = loc.ndim - nd
        super().__init__(loc.shape[:cut], loc.shape[cut:], validate_args=False)

    # -- sampling --------------------------------------------------------------------------
    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(u)  # its backward reads y: never modified in place
        if self._safe:
            one = 1.0 - torch.finfo(y.dtype).eps
            y = y.clamp(-one, one)  # a new tensor (clamp's backward reads its input)
        half, mid = self._half, self._mid
        if isinstance(half, torch.Tensor) or isinstance(mid, torch.Tensor) or not self._safe:
            return mid + half * y
        if half != 1.0:  # floats after the clamp: in place, and nothing at all for [-1, 1]
            y = y.mul_(half)
        return y.add_(mid) if mid != 0.0 else y

    def rsample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        u = torch.addcmul(self.loc, self.scale, eps)
        a = self._squash(u)
        self._last = (a, u, eps)
        return a

    def sample(self, sample_shape: torch.Size | tuple = ()) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample(sample_shape)

    # -- densities -------------------------------------------------------------------------
    def _pre_tanh(self, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u, z)``: the pre-tanh value and its standard score ``(u - loc) / scale``."""
        last = self._last
        if last is not None and last[0] is value:  # the sample just drawn: u and z are known
            return last[1], last[2]
        y = (value - self._mid) / self._half
        one = 1.0 - torch.finfo(y.dtype).eps
        u = torch.atanh(y.clamp(-one, one))
        return u, (u - self.loc) / self.scale

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        u, z = self._pre_tanh(value)
        # log N(u) - log(1 - tanh(u)^2) - log h
        #   = 2 (u + softplus(-2u)) - (z^2 / 2 + log scale) - (log(2 pi) / 2 + 2 log 2 + log h)
        quad = torch.addcmul(self.scale.log(), z, z, value=0.5)
        lp = torch.nn.functional.softplus(-2.0 * u).add_(u).mul_(2.0).sub_(quad)
        if isinstance(self._half, torch.Tensor):
            lp = lp - self._half.log()
        const = _HALF_LOG_2PI + 2.0 * _LOG_2
        if not isinstance(self._half, torch.Tensor) and self._half != 1.0:
            const += math.log(self._half)
        lp = lp.sub_(const)
        nd = len(self.event_shape)
        return lp.sum(tuple(range(-nd, 0))) if nd else lp

    @property
    def deterministic_sample(self) -> torch.Tensor:
        a = self._mid + self._half * torch.tanh(self.loc)
        self._last = (a, self.loc, torch.zeros_like(self.loc))  # its log-prob: u = loc, z = 0
        return a

    @property
    def mode(self) -> torch.Tensor:
        return self.deterministic_sample

    @property
    def support(self) -> Any:
        return D.constraints.interval(self.low, self.high)

    def __repr__(self) -> str:
        return f"TanhNormal(loc: {tuple(self.loc.shape)}, low={self.low}, high={self.high})"


class IndependentNormal(D.Independent):
    """A diagonal Gaussian over the last ``event_dim`` dims (PPO's continuous policy).

    ``Independent(Normal(loc, scale), event_dim)``: the same draws and, bit for bit, the
    same log-probs, in fewer torch ops (each costs microseconds on one row, the collector's
    case). Built without ``broadcast_all`` when ``scale`` has ``loc``'s shape; without
    autograd, ``log_prob`` does ``Normal.log_prob``'s float ops in fewer kernels (in place
    where it can) and takes the sign once, after the sum (negation is exact)::

        log p(a) = -sum(d^2 / (2 var) + log scale + log sqrt(2 pi)),  d = a - loc

    With autograd on (the losses), ``log_prob`` is torch's: the gradients are torch's too.

    Args:
        loc: mean, ``[*batch, *event]``.
        scale: standard deviation (positive), same shape.
        upscale: the bound of ``loc`` when ``tanh_loc``.
        tanh_loc: map ``loc`` to ``upscale * tanh(loc / upscale)`` first.
        event_dim: trailing dims that form one action.

    Examples:
        >>> import torch
        >>> d = IndependentNormal(torch.zeros(3, 2), torch.ones(3, 2))
        >>> d.log_prob(torch.zeros(3, 2)).shape
        torch.Size([3])
        >>> d.deterministic_sample.shape
        torch.Size([3, 2])
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        tanh_loc: bool = False,
        event_dim: int = 1,
    ) -> None:
        super().__init__(_normal(_squash_loc(loc, upscale, tanh_loc), scale), event_dim,
                         validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            return super().log_prob(value)
        base = self.base_dist
        return _normal_log_prob(value, base.loc, base.scale, self.reinterpreted_batch_ndims)

    @staticmethod
    def draw(loc: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One draw of ``IndependentNormal(loc, scale)`` (defaults, one event dim) and its
        log-prob, without building the distribution: the collector's call, where building
        ``Normal`` and ``Independent`` costs more than the draw. The same random stream and
        the same bits as ``d.rsample()`` then ``d.log_prob(sample)``; gradients are not
        tracked (call it under ``torch.no_grad()``; ``scale`` of ``loc``'s shape).

        Examples:
            >>> import torch
            >>> loc, scale = torch.zeros(2, 3), torch.ones(2, 3)
            >>> with torch.no_grad():
            ...     _ = torch.manual_seed(0)
            ...     action, log_prob = IndependentNormal.draw(loc, scale)
            ...     _ = torch.manual_seed(0)
            ...     d = IndependentNormal(loc, scale)
            ...     same = d.rsample()
            >>> bool((action == same).all()), bool((log_prob == d.log_prob(same)).all())
            (True, True)
        """
        # Normal.rsample's own ops: eps from a fresh standard normal, loc + eps * scale
        value = loc + torch.empty(loc.shape, dtype=loc.dtype, device=loc.device).normal_() * scale
        return value, _normal_log_prob(value, loc, scale, 1)

    @property
    def mode(self) -> torch.Tensor:
        return self.base_dist.loc

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.base_dist.loc


class TruncatedNormal(_TDTruncatedNormal):
    """A Gaussian restricted to ``[low, high]``, its log-prob summed over the last dim.

    ``tensordict.nn``'s ``TruncatedNormal`` underneath, with TorchRL's arguments
    (``low``/``high`` rather than ``a``/``b``, ``upscale`` and ``tanh_loc``).

    Args:
        loc: mean of the Gaussian before truncation, ``[*batch, n]``.
        scale: its standard deviation, same shape.
        upscale: the bound of ``loc`` when ``tanh_loc``.
        low: lower bound (float or tensor broadcastable to ``loc``).
        high: upper bound.
        tanh_loc: map ``loc`` to ``upscale * tanh(loc / upscale)`` first.

    Examples:
        >>> import torch
        >>> d = TruncatedNormal(torch.zeros(5, 2), torch.ones(5, 2), low=-1.0, high=1.0)
        >>> a = d.sample()
        >>> bool(((a >= -1) & (a <= 1)).all()), d.log_prob(a).shape
        (True, torch.Size([5]))
    """

    def __init__(
        self,
        loc: torch.Tensor,
        scale: torch.Tensor,
        upscale: float = 5.0,
        low: float | torch.Tensor = -1.0,
        high: float | torch.Tensor = 1.0,
        tanh_loc: bool = False,
    ) -> None:
        loc = _squash_loc(loc, upscale, tanh_loc)
        low_t = torch.as_tensor(low, dtype=loc.dtype, device=loc.device).expand_as(loc)
        high_t = torch.as_tensor(high, dtype=loc.dtype, device=loc.device).expand_as(loc)
        super().__init__(loc, scale, low_t, high_t, validate_args=False)
        self.low, self.high = low_t, high_t

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return super().log_prob(value).sum(-1)

    def entropy(self) -> torch.Tensor:
        return super().entropy().sum(-1)

    @property
    def mode(self) -> torch.Tensor:
        return torch.maximum(torch.minimum(self.loc, self.high), self.low)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode
