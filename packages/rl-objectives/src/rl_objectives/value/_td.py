"""TD(0), TD(1) and TD(lambda) returns (Sutton & Barto, 2018, ch. 6, 7 and 12).

With ``d_t`` = ``done``, ``m_t`` = ``terminated`` and the last step of the batch treated
as a cut (``d_{T-1} = 1``), the lambda-return is::

    G_t = r_t + gamma (1 - m_t) [ (1 - l_t) V(s_{t+1}) + l_t G_{t+1} ],
    l_t = lmbda (1 - d_t)

TD(0) is ``lmbda = 0`` and TD(1) (the Monte-Carlo return bootstrapped at cuts) is
``lmbda = 1``. The vectorised forms solve ``G_t = b_t + a_t G_{t+1}`` with
``b_t = r_t + gamma (1 - m_t)(1 - l_t) V(s_{t+1})`` and ``a_t = gamma (1 - m_t) l_t``.
"""

from __future__ import annotations

import torch

from rl_objectives.value import _kernels
from rl_objectives.value._checks import as_bool, check_inputs, check_same_shape, coefficient
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
    to_time_major,
)

__all__ = [
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
]


def _lambda_terms(gamma, lmbda, next_state_value, reward, done, terminated, time_dim):
    """Checks, then ``(a_t, b_t)`` of the lambda-return recurrence, term by term.

    The literal equation: the reference loop's terms, and the functional scan's (under
    ``torch.compile`` or with autograd); :func:`_td_lambda_time_major` builds the same
    terms for the in-place scan.
    """
    gamma, lmbda, done, terminated, time_dim = check_inputs(
        gamma, lmbda, reward, done, terminated, time_dim, next_state_value=next_state_value
    )
    cut = done.clone()
    if cut.shape[time_dim]:
        cut.select(time_dim, -1).fill_(True)  # the batch ends: bootstrap there
    trace = (~cut).to(reward.dtype) * lmbda  # l_t
    discount = (~terminated).to(reward.dtype) * gamma  # gamma (1 - m_t)
    a = (discount * trace).expand_as(reward)
    b = reward + discount * (1.0 - trace) * next_state_value
    return a, b, time_dim


def _td_lambda_time_major(gamma, lmbda, next_state_value, reward, done, terminated,
                          time_dim):
    """The eager path without autograd: ``(a_t, b_t)`` built into the scan's buffers.

    ``a_t = c k_t`` with ``c = gamma lmbda`` and ``k_t = (1 - m_t)(1 - cut_t)``, and
    ``b_t = r_t + gamma (1 - m_t) V(s_{t+1}) - c k_t V(s_{t+1})``, which is
    ``r_t + gamma (1 - m_t)(1 - l_t) V(s_{t+1})`` rearranged (``k_t = 1`` implies
    ``m_t = 0``). Masks are read as uint8 (see ``_time_major``); ``b`` is built in one
    fresh tensor that then serves as the (unpadded) ``a`` buffer.
    """
    steps = reward.shape[time_dim]
    keep = ~done if terminated is done else torch.logical_or(done, terminated).logical_not_()
    keep.select(time_dim, -1).fill_(False)  # the batch ends: bootstrap there
    coef = gamma * lmbda
    b = torch.mul(next_state_value, terminated.logical_not().view(torch.uint8))
    if isinstance(coef, float):
        b = torch.add(reward, b, alpha=gamma, out=b).addcmul_(
            next_state_value, keep.view(torch.uint8), value=-coef)
    else:
        b = torch.addcmul(reward, gamma, b).sub_(next_state_value * keep.view(torch.uint8) * coef)
    b_buf = scan_buffer(b, time_dim)
    to_time_major(b, time_dim, b_buf[:steps])
    a_buf = scan_buffer(b, time_dim, spare=b, slot="a")
    mask_to_time_major(keep, coef, time_dim, a_buf[:steps])
    return from_time_major(scan_time_major_(a_buf, b_buf, steps), reward, time_dim)


def td0_return_estimate(
    gamma: float | torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    done: torch.Tensor | None = None,
) -> torch.Tensor:
    """One-step return ``G_t = r_t + gamma (1 - m_t) V(s_{t+1})``.

    Args:
        gamma: discount, float or tensor.
        next_state_value: ``V(s_{t+1})``, shape ``[*B, T, *F]`` (or any shape).
        reward: ``r_t``, same shape.
        terminated: ``m_t``; ``done`` when ``None``; no termination when both are ``None``.
        done: ``d_t``, only used when ``terminated`` is ``None``.

    Returns:
        The return, shaped like ``reward``.

    Examples:
        >>> import torch
        >>> td0_return_estimate(0.9, torch.ones(2, 1), torch.ones(2, 1),
        ...                     torch.tensor([[False], [True]])).squeeze(-1)
        tensor([1.9000, 1.0000])
    """
    if terminated is None:
        terminated = done if done is not None else torch.zeros_like(reward, dtype=torch.bool)
    check_same_shape(
        "reward", {"reward": reward, "next_state_value": next_state_value, "terminated": terminated}
    )
    gamma = coefficient("gamma", gamma, reward)
    return reward + gamma * next_state_value.masked_fill(as_bool(terminated), 0.0)


def td0_advantage_estimate(
    gamma: float | torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD error ``r_t + gamma (1 - m_t) V(s_{t+1}) - V(s_t)`` (Sutton, 1988).

    Args:
        gamma: discount, float or tensor.
        state_value: ``V(s_t)``.
        next_state_value: ``V(s_{t+1})``, same shape.
        reward: ``r_t``, same shape.
        done: ``d_t`` (used as ``terminated`` when that is ``None``).
        terminated: ``m_t``.

    Returns:
        The advantage, shaped like ``reward``.

    Examples:
        >>> import torch
        >>> x = torch.ones(2, 1); d = torch.zeros(2, 1, dtype=torch.bool)
        >>> td0_advantage_estimate(0.5, x, x, x, d).squeeze(-1)
        tensor([0.5000, 0.5000])
    """
    check_same_shape("reward", {"reward": reward, "state_value": state_value})
    terminated = done if terminated is None else terminated
    return td0_return_estimate(gamma, next_state_value, reward, terminated) - state_value


def td_lambda_return_estimate(
    gamma, lmbda, next_state_value, reward, done, terminated=None, *, time_dim: int = -2
) -> torch.Tensor:
    """TD(lambda) return ``G_t`` (module docstring) with a loop over time: the reference.

    Arguments as in :func:`vec_td_lambda_return_estimate`; returns ``G``, shaped like
    ``reward``.
    """
    a, b, time_dim = _lambda_terms(gamma, lmbda, next_state_value, reward, done, terminated,
                                   time_dim)
    return reverse_linear_loop(a, b, time_dim)


def vec_td_lambda_return_estimate(
    gamma: float | torch.Tensor,
    lmbda: float | torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    *,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(lambda) return by the chunked scan; equals :func:`td_lambda_return_estimate`.

    ``G_t = r_t + gamma (1 - m_t)[(1 - l_t) V(s_{t+1}) + l_t G_{t+1}]``,
    ``l_t = lmbda (1 - d_t)``, with the last step of the batch treated as a cut.

    Args:
        gamma: discount, a float or a tensor broadcastable to ``reward``.
        lmbda: trace decay, a float or a tensor broadcastable to ``reward``.
        next_state_value: ``V(s_{t+1})``, shape ``[*B, T, *F]``.
        reward: ``r_t``, same shape.
        done: ``d_t``, bool or 0/1, same shape.
        terminated: ``m_t``, same shape; ``done`` when ``None``.
        time_dim: the time dimension of the tensors.

    Returns:
        ``G``, shaped like ``reward``.

    Raises:
        ShapeMismatchError: the tensors' shapes differ.
        TimeDimError: ``time_dim`` is out of range.

    Examples:
        >>> import torch
        >>> v = torch.zeros(3, 1); r = torch.ones(3, 1); d = torch.zeros(3, 1, dtype=torch.bool)
        >>> vec_td_lambda_return_estimate(0.5, 1.0, v, r, d).squeeze(-1)
        tensor([1.7500, 1.5000, 1.0000])
    """
    gamma, lmbda, done, terminated, time_dim = check_inputs(
        gamma, lmbda, reward, done, terminated, time_dim, next_state_value=next_state_value
    )
    if reward.numel() and not needs_graph(next_state_value, reward, gamma, lmbda):
        if _kernels.usable(gamma, lmbda, next_state_value, reward):
            return _kernels.td_lambda_kernel(gamma, lmbda, next_state_value, reward, done,
                                             terminated, time_dim)
        return _td_lambda_time_major(gamma, lmbda, next_state_value, reward, done, terminated,
                                     time_dim)
    a, b, time_dim = _lambda_terms(gamma, lmbda, next_state_value, reward, done, terminated,
                                   time_dim)
    return reverse_linear_scan(a, b, time_dim)


def td1_return_estimate(
    gamma, next_state_value, reward, done, terminated=None, *, time_dim: int = -2
) -> torch.Tensor:
    """TD(1) return with a loop over time steps (the reference)."""
    return td_lambda_return_estimate(gamma, 1.0, next_state_value, reward, done, terminated,
                                     time_dim=time_dim)


def vec_td1_return_estimate(
    gamma, next_state_value, reward, done, terminated=None, *, time_dim: int = -2
) -> torch.Tensor:
    """TD(1) return by the chunked scan; equals :func:`td1_return_estimate`."""
    return vec_td_lambda_return_estimate(gamma, 1.0, next_state_value, reward, done, terminated,
                                         time_dim=time_dim)


def td_lambda_advantage_estimate(
    gamma, lmbda, state_value, next_state_value, reward, done, terminated=None, *,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(lambda) advantage ``G_t - V(s_t)`` (loop)."""
    check_same_shape("reward", {"reward": reward, "state_value": state_value})
    return td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated,
                                     time_dim=time_dim) - state_value


def vec_td_lambda_advantage_estimate(
    gamma, lmbda, state_value, next_state_value, reward, done, terminated=None, *,
    time_dim: int = -2,
) -> torch.Tensor:
    """TD(lambda) advantage ``G_t - V(s_t)`` (chunked scan)."""
    check_same_shape("reward", {"reward": reward, "state_value": state_value})
    return vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done,
                                         terminated, time_dim=time_dim) - state_value


def td1_advantage_estimate(
    gamma, state_value, next_state_value, reward, done, terminated=None, *, time_dim: int = -2
) -> torch.Tensor:
    """TD(1) advantage ``G_t - V(s_t)`` (loop)."""
    return td_lambda_advantage_estimate(gamma, 1.0, state_value, next_state_value, reward, done,
                                        terminated, time_dim=time_dim)


def vec_td1_advantage_estimate(
    gamma, state_value, next_state_value, reward, done, terminated=None, *, time_dim: int = -2
) -> torch.Tensor:
    """TD(1) advantage ``G_t - V(s_t)`` (chunked scan)."""
    return vec_td_lambda_advantage_estimate(gamma, 1.0, state_value, next_state_value, reward,
                                            done, terminated, time_dim=time_dim)

