"""Generalised advantage estimation (Schulman et al., 2016, arXiv:1506.02438)."""

from __future__ import annotations

import torch

from rl_objectives.value import _kernels
from rl_objectives.value._checks import check_inputs
from rl_objectives.value._scan import (
    needs_graph,
    reverse_linear_loop,
    reverse_linear_scan,
    scan_time_major_,
)
from rl_objectives.value._time_major import (
    from_time_major,
    mask_to_time_major,
    scan_buffer,
    scratch,
    to_time_major,
)

__all__ = ["generalized_advantage_estimate", "vec_generalized_advantage_estimate"]


def _terms(gamma, lmbda, state_value, next_state_value, reward, done, terminated):
    """``(a_t, b_t)`` of the recurrence ``A_t = b_t + a_t A_{t+1}``, term by term.

    ``a_t = gamma lmbda (1 - d_t)`` and the TD error
    ``b_t = delta_t = r_t + gamma (1 - m_t) V(s_{t+1}) - V(s_t)``: the reference loop's
    terms, and the functional scan's (under ``torch.compile`` or with autograd);
    :func:`_gae_time_major` builds the same terms for the in-place scan.
    """
    bootstrap = next_state_value.masked_fill(terminated, 0.0)
    if isinstance(gamma, float):
        delta = torch.add(reward, bootstrap, alpha=gamma)
    else:
        delta = torch.addcmul(reward, gamma, bootstrap)
    return (~done).to(reward.dtype) * (gamma * lmbda), delta.sub_(state_value)


def _not(mask: torch.Tensor) -> torch.Tensor:
    """``~mask`` in the scratch memory of the masks (used before the next call)."""
    return torch.logical_not(mask, out=scratch("mask", tuple(mask.shape), torch.bool, mask.device))


def _gae_time_major(gamma, lmbda, state_value, next_state_value, reward, done, terminated,
                    time_dim):
    """The eager path without autograd: terms built straight into the scan's buffers.

    Three fresh ``[*B, T, *F]`` tensors in all: ``value_target`` holds the TD error, then
    (unpadded) the discounts, then the result; a time-major buffer holds the TD error,
    then the solution; ``advantage``. Masks are read as uint8 (see ``_time_major``).
    """
    steps = reward.shape[time_dim]
    value_target = torch.sub(reward, state_value)
    bootstrap = _not(terminated).view(torch.uint8)
    if isinstance(gamma, float):
        value_target.addcmul_(next_state_value, bootstrap, value=gamma)
    else:
        value_target.addcmul_(torch.mul(next_state_value, bootstrap), gamma)
    b_buf = scan_buffer(value_target, time_dim)
    to_time_major(value_target, time_dim, b_buf[:steps])  # the TD error delta_t
    a_buf = scan_buffer(value_target, time_dim, spare=value_target, slot="a")
    coef = gamma * lmbda
    if isinstance(coef, float) or coef.numel() == 1:
        # a_t = coef (1 - d_t) = coef - coef d_t, exactly (d_t is 0 or 1): no negated mask
        mask_to_time_major(done, -coef, time_dim, a_buf[:steps]).add_(coef)
    else:
        mask_to_time_major(_not(done), coef, time_dim, a_buf[:steps])
    advantage = from_time_major(scan_time_major_(a_buf, b_buf, steps), reward, time_dim)
    return advantage, torch.add(advantage, state_value, out=value_target)


def generalized_advantage_estimate(
    gamma: float | torch.Tensor,
    lmbda: float | torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with a Python loop over time steps: the reference implementation.

    With ``d_t`` = ``done`` and ``m_t`` = ``terminated`` at step ``t``::

        delta_t = r_t + gamma (1 - m_t) V(s_{t+1}) - V(s_t)
        A_t     = delta_t + gamma lmbda (1 - d_t) A_{t+1},        A_T = 0
        G_t     = A_t + V(s_t)

    Termination stops the bootstrap; any done (termination or truncation) cuts the
    trace, and a truncated step still bootstraps from ``V(s_{t+1})``.

    Args:
        gamma: discount, a float or a tensor broadcastable to ``reward``.
        lmbda: trace decay, a float or a tensor broadcastable to ``reward``.
        state_value: ``V(s_t)``, shape ``[*B, T, *F]`` (time at ``time_dim``).
        next_state_value: ``V(s_{t+1})``, same shape.
        reward: ``r_t``, the reward of the step ``s_t -> s_{t+1}``, same shape.
        done: ``d_t``, bool (or 0/1), same shape.
        terminated: ``m_t``, bool (or 0/1), same shape; ``done`` when ``None``.
        time_dim: the time dimension of the tensors.

    Returns:
        ``(advantage, value_target)``, both shaped like ``reward``.

    Raises:
        ShapeMismatchError: the tensors' shapes differ.
        TimeDimError: ``time_dim`` is out of range.

    Examples:
        >>> import torch
        >>> v = torch.zeros(3, 1); r = torch.ones(3, 1); d = torch.zeros(3, 1, dtype=torch.bool)
        >>> adv, target = generalized_advantage_estimate(0.5, 1.0, v, v, r, d)
        >>> adv.squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000])
    """
    gamma, lmbda, done, terminated, time_dim = check_inputs(
        gamma, lmbda, reward, done, terminated, time_dim,
        state_value=state_value, next_state_value=next_state_value,
    )  # fmt: skip
    a, b = _terms(gamma, lmbda, state_value, next_state_value, reward, done, terminated)
    advantage = reverse_linear_loop(a, b, time_dim)
    return advantage, advantage + state_value


def vec_generalized_advantage_estimate(
    gamma: float | torch.Tensor,
    lmbda: float | torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE without a loop over time steps; equal to :func:`generalized_advantage_estimate`.

    Same equations, arguments, shapes, returns and errors as
    :func:`generalized_advantage_estimate`. The recurrence
    ``A_t = delta_t + gamma lmbda (1 - d_t) A_{t+1}`` is solved by a chunked scan that only
    multiplies and adds (no division), so it is exact for every done pattern. Eager CPU
    calls without autograd and with float ``gamma``/``lmbda`` run one compiled pass over
    the data (numba, :mod:`rl_objectives.value._kernels`); other eager calls without
    autograd run the scan in place in a time-major layout, about ``2 sqrt(T)`` vectorised
    steps; under ``torch.compile`` or with inputs that require grad it takes a functional
    log-depth path that traces without a graph break.

    Examples:
        >>> import torch
        >>> v = torch.zeros(3, 1); r = torch.ones(3, 1)
        >>> d = torch.tensor([[False], [True], [False]])
        >>> adv, target = vec_generalized_advantage_estimate(0.5, 1.0, v, v, r, d)
        >>> adv.squeeze(-1)
        tensor([1.5000, 1.0000, 1.0000])
    """
    gamma, lmbda, done, terminated, time_dim = check_inputs(
        gamma, lmbda, reward, done, terminated, time_dim,
        state_value=state_value, next_state_value=next_state_value,
    )  # fmt: skip
    if reward.numel() and not needs_graph(state_value, next_state_value, reward, gamma, lmbda):
        if _kernels.usable(gamma, lmbda, state_value, next_state_value, reward):
            return _kernels.gae_kernel(gamma, lmbda, state_value, next_state_value, reward,
                                       done, terminated, time_dim)
        return _gae_time_major(gamma, lmbda, state_value, next_state_value, reward, done,
                               terminated, time_dim)
    a, b = _terms(gamma, lmbda, state_value, next_state_value, reward, done, terminated)
    advantage = reverse_linear_scan(a, b, time_dim)
    return advantage, advantage + state_value
