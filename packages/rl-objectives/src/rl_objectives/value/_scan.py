"""Chunked solver of the reverse linear recurrence behind every return.

All the return estimators of this package are one recurrence read backwards in time,

    x_t = b_t + a_t * x_{t+1},    t = T-1, ..., 0,    x_T = 0,

with ``a_t`` a discount (``gamma * lmbda * (1 - done_t)`` for GAE) and ``b_t`` a one-step
term (the TD error for GAE). It is solved without a Python loop over single time steps
and without any division, so it is exact for every done pattern. Two paths:

**In place, time-major** (eager, no autograd graph: the usual case, advantages are
computed under ``no_grad``). Time is cut into ``n`` chunks of ``K ~ sqrt(T)`` steps and
the data is laid out ``[n, K, R]`` (time-major, ``R`` = all other dims), so every step
below is one vectorised operation over contiguous rows:

1. within every chunk, backwards over its ``K`` positions at once for all chunks:
   ``b_k += a_k * b_{k+1}`` (the local solution with ``x = 0`` after the chunk) and
   ``a_k *= a_{k+1}`` (the product ``A_k`` of the discounts to the chunk's end);
2. the ``n`` chunk starts form the same recurrence, ``x_start(j) = b_start(j) +
   A_start(j) x_start(j + 1)``, solved in place by the same three steps (recursively, on
   the strided rows of the chunk starts), which makes every chunk start exact;
3. one fix-up pass: ``x_k = b_k + A_k * x_start(j + 1)`` for the other positions.

That is about ``2 sqrt(T)`` small operations and four passes over the data, plus
the copies into and out of the time-major layout (see ``_time_major``). Only products and
sums of the inputs appear (``A_k`` is a running product, never divided), so a done makes
``A = 0`` exactly and nothing leaks across it.

**Functional** (under ``torch.compile``, or when autograd records through the scan):
recursive doubling (Hillis & Steele, 1986) inside chunks of ``chunk`` steps, written
without ``out=`` or data-dependent branches, so that dynamo traces it without a graph
break; the chunk starts are solved by the same function recursively.
"""

from __future__ import annotations

import torch

from rl_objectives.value._time_major import (
    chunk_shape,
    from_time_major,
    scan_buffer,
    to_time_major,
)

__all__ = ["needs_graph", "reverse_linear_loop", "reverse_linear_scan", "scan_time_major_"]

_CHUNK = 32


def needs_graph(*tensors: object) -> bool:
    """True under ``torch.compile`` or when autograd must record through the inputs."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in tensors
    )


def _within_chunks_(a3: torch.Tensor, b3: torch.Tensor) -> None:
    """Step 1 on ``[n, K, R]`` views: local solutions in ``b3``, products in ``a3``."""
    b_steps, a_steps = b3.unbind(1), a3.unbind(1)
    for k in range(b3.shape[1] - 2, -1, -1):
        b_steps[k].addcmul_(a_steps[k], b_steps[k + 1])
        a_steps[k].mul_(a_steps[k + 1])


def _solve_(a2: torch.Tensor, b2: torch.Tensor) -> None:
    """Solve in place on ``[T, R]`` views: chunks, then the chunk starts recursively."""
    steps = b2.shape[0]
    chunk, n_chunks = chunk_shape(steps)
    if chunk * n_chunks != steps:  # no divisor near sqrt(T) (T is small here): sequential
        b_steps, a_steps = b2.unbind(0), a2.unbind(0)
        for t in range(steps - 2, -1, -1):
            b_steps[t].addcmul_(a_steps[t], b_steps[t + 1])
        return
    a3, b3 = a2.unflatten(0, (n_chunks, chunk)), b2.unflatten(0, (n_chunks, chunk))
    _within_chunks_(a3, b3)
    if n_chunks > 1:
        # step 2: exact x at the chunk starts (this overwrites a at the starts, unused after)
        _solve_(a3.select(1, 0), b3.select(1, 0))
        # step 3: positions 1.. of chunk j read the start of chunk j + 1 (disjoint memory)
        b3[:-1, 1:].addcmul_(a3[:-1, 1:], b3[1:, :1])


def scan_time_major_(a: torch.Tensor, b: torch.Tensor, steps: int) -> torch.Tensor:
    """Solve the recurrence in place on time-major buffers from :func:`scan_buffer`.

    Args:
        a: ``[n * K, R]`` coefficients, overwritten with running products.
        b: ``[n * K, R]`` one-step terms, overwritten with the solution.
        steps: the real number of steps ``T`` (rows past it are zero padding).

    Returns:
        ``x`` as the ``[T, R]`` leading rows of ``b``.
    """
    _solve_(a, b)
    return b[:steps]


def _double_functional(
    b: torch.Tensor, a: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive doubling inside the last dim, without ``out=`` so that inductor fuses it."""
    s = 1
    while s < k:
        b = torch.cat((b[..., : k - s] + a[..., : k - s] * b[..., s:], b[..., k - s :]), -1)
        a = torch.cat((a[..., : k - s] * a[..., s:], a[..., k - s :]), -1)
        s *= 2
    return b, a


def _scan_rows(b: torch.Tensor, a: torch.Tensor, chunk: int) -> torch.Tensor:
    """The functional path along the last dim of 2-d ``[R, T]`` inputs."""
    rows, steps = b.shape
    k = min(chunk, 1 << max(steps - 1, 0).bit_length())
    n_chunks = -(-steps // k)
    pad = n_chunks * k - steps
    if pad:  # padded steps have a = b = 0, i.e. x = 0 after the end: no effect
        b = torch.nn.functional.pad(b, (0, pad))
        a = torch.nn.functional.pad(a, (0, pad))
    b, a = _double_functional(b.reshape(rows, n_chunks, k), a.reshape(rows, n_chunks, k), k)
    if n_chunks > 1:
        first = _scan_rows(b[..., 0], a[..., 0], chunk)  # x at every chunk start
        after = torch.nn.functional.pad(first[..., 1:], (0, 1)).unsqueeze(-1)
        b = b + a * after
    return b.reshape(rows, n_chunks * k)[..., :steps]


def reverse_linear_loop(a: torch.Tensor, b: torch.Tensor, time_dim: int) -> torch.Tensor:
    """``x_t = b_t + a_t * x_{t+1}`` with ``x_T = 0``, one time step at a time.

    The sequential loop that :func:`reverse_linear_scan` equals: the reference estimators
    (``generalized_advantage_estimate``, ``td_lambda_return_estimate``) solve with it.
    ``a`` broadcasts to ``b``; ``x`` has the shape and dtype of ``b``.
    """
    a = a.expand_as(b)
    x = torch.empty_like(b)
    if not b.shape[time_dim]:
        return x
    running = torch.zeros_like(b.select(time_dim, 0))
    for t in range(b.shape[time_dim] - 1, -1, -1):
        running = b.select(time_dim, t) + a.select(time_dim, t) * running
        x.select(time_dim, t).copy_(running)
    return x


def reverse_linear_scan(
    a: torch.Tensor, b: torch.Tensor, time_dim: int = -1, *, chunk: int = _CHUNK
) -> torch.Tensor:
    """Solve ``x_t = b_t + a_t * x_{t+1}`` backwards in time with ``x_T = 0``.

    Eager calls without an autograd graph take the in-place time-major path; calls under
    ``torch.compile`` or with inputs that require grad take the functional path (module
    docstring). Both equal the sequential loop up to the order of float additions.

    Args:
        a: the coefficients ``a_t``; same shape and dtype as ``b``.
        b: the one-step terms ``b_t``.
        time_dim: the time dimension of ``a`` and ``b``.
        chunk: steps per chunk of the functional path (a power of two).

    Returns:
        ``x``, with the shape and dtype of ``b``.

    Examples:
        >>> import torch
        >>> a = torch.tensor([0.5, 0.0, 0.5])
        >>> b = torch.tensor([1.0, 2.0, 4.0])
        >>> reverse_linear_scan(a, b)
        tensor([2., 2., 4.])
    """
    steps = b.shape[time_dim]
    if steps == 0:
        return torch.zeros_like(b)
    if not needs_graph(a, b):
        a_buf, b_buf = scan_buffer(b, time_dim, slot="a"), scan_buffer(b, time_dim)
        to_time_major(a.expand_as(b), time_dim, a_buf[:steps])
        to_time_major(b, time_dim, b_buf[:steps])
        return from_time_major(scan_time_major_(a_buf, b_buf, steps), b, time_dim)
    moved_b = b.movedim(time_dim, -1)
    moved_a = a.expand_as(b).movedim(time_dim, -1)
    x = _scan_rows(moved_b.reshape(-1, steps), moved_a.reshape(-1, steps), chunk)
    return x.reshape(moved_b.shape).movedim(-1, time_dim)
