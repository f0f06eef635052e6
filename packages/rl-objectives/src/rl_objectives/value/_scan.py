"""Chunked, log-depth solver of the reverse linear recurrence behind every return.

All the return estimators of this package are one recurrence read backwards in time,

    x_t = b_t + a_t * x_{t+1},    t = T-1, ..., 0,    x_T = 0,

with ``a_t`` a discount (``gamma * lmbda * (1 - done_t)`` for GAE) and ``b_t`` a one-step
term (the TD error for GAE). ``reverse_linear_scan`` solves it without a Python loop over
time steps and without any division, so it is exact for every done pattern:

1. Time is cut into chunks of ``K`` steps. Inside every chunk the recurrence is solved by
   recursive doubling (Hillis & Steele, 1986): after the round with stride ``s`` each
   position holds the affine map ``x_t = b_t + a_t * x_{t+s}``; composing two maps is
   ``(b, a) o (b', a') = (b + a * b', a * a')``. ``log2(K)`` rounds, each two fused
   passes over the data, all chunks of all rows at once.
2. The chunks' first positions then form a recurrence of length ``T / K`` over chunks;
   it is solved by the same function, and one last pass adds ``a_t * x_{next chunk}``.

Only products and sums of the inputs appear (no ``cumprod`` division that would blow up
or divide by zero at a done), so the result equals the sequential loop up to the order of
floating-point additions: the rounding error grows with ``log2(T)`` instead of ``T``.
"""

from __future__ import annotations

import torch

__all__ = ["reverse_linear_scan"]

_CHUNK = 32


def _double_within_chunks(b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive doubling inside the last dim (``[R, nc, K]``); returns new tensors."""
    k = b.shape[-1]
    needs_graph = torch.is_grad_enabled() and (b.requires_grad or a.requires_grad)
    if needs_graph or torch.compiler.is_compiling():  # out= ops neither trace nor backprop
        return _double_functional(b, a, k)
    b2, a2 = torch.empty_like(b), torch.empty_like(a)
    spare_b, spare_a = torch.empty_like(b), torch.empty_like(a)  # never write the inputs
    s = 1
    while s < k:
        torch.addcmul(b[..., : k - s], a[..., : k - s], b[..., s:], out=b2[..., : k - s])
        b2[..., k - s :] = b[..., k - s :]
        torch.mul(a[..., : k - s], a[..., s:], out=a2[..., : k - s])
        a2[..., k - s :] = a[..., k - s :]
        b, a, b2, a2 = b2, a2, (spare_b if s == 1 else b), (spare_a if s == 1 else a)
        s *= 2
    return b, a


def _double_functional(b: torch.Tensor, a: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same rounds written without ``out=`` so that inductor fuses them."""
    s = 1
    while s < k:
        b = torch.cat((b[..., : k - s] + a[..., : k - s] * b[..., s:], b[..., k - s :]), -1)
        a = torch.cat((a[..., : k - s] * a[..., s:], a[..., k - s :]), -1)
        s *= 2
    return b, a


def _scan_rows(b: torch.Tensor, a: torch.Tensor, chunk: int) -> torch.Tensor:
    """Solve ``x_t = b_t + a_t x_{t+1}`` along the last dim of 2-d ``[R, T]`` inputs."""
    rows, steps = b.shape
    k = min(chunk, 1 << max(steps - 1, 0).bit_length())
    n_chunks = -(-steps // k)
    pad = n_chunks * k - steps
    if pad:  # padded steps have a = b = 0, i.e. x = 0 after the end: no effect
        b = torch.nn.functional.pad(b, (0, pad))
        a = torch.nn.functional.pad(a, (0, pad))
    b, a = _double_within_chunks(b.reshape(rows, n_chunks, k), a.reshape(rows, n_chunks, k))
    if n_chunks > 1:
        first = _scan_rows(b[..., 0], a[..., 0], chunk)  # x at every chunk start
        after = torch.nn.functional.pad(first[..., 1:], (0, 1)).unsqueeze(-1)
        b = torch.addcmul(b, a, after)
    return b.reshape(rows, n_chunks * k)[..., :steps]


def reverse_linear_scan(
    a: torch.Tensor, b: torch.Tensor, time_dim: int = -1, *, chunk: int = _CHUNK
) -> torch.Tensor:
    """Solve ``x_t = b_t + a_t * x_{t+1}`` backwards in time with ``x_T = 0``.

    Args:
        a: the coefficients ``a_t``; same shape and dtype as ``b``.
        b: the one-step terms ``b_t``.
        time_dim: the time dimension of ``a`` and ``b``.
        chunk: steps per chunk of the doubling scan (a power of two).

    Returns:
        ``x``, with the shape and dtype of ``b``.

    Examples:
        >>> import torch
        >>> a = torch.tensor([0.5, 0.0, 0.5])
        >>> b = torch.tensor([1.0, 2.0, 4.0])
        >>> reverse_linear_scan(a, b)
        tensor([2., 2., 4.])
    """
    moved_b = b.movedim(time_dim, -1)
    moved_a = a.movedim(time_dim, -1)
    shape = moved_b.shape
    steps = shape[-1]
    if steps == 0:
        return torch.zeros_like(b)
    x = _scan_rows(moved_b.reshape(-1, steps), moved_a.reshape(-1, steps), chunk)
    return x.reshape(shape).movedim(-1, time_dim)
