"""V-trace off-policy targets (Espeholt et al., 2018, IMPALA, arXiv:1802.01561)."""

from __future__ import annotations

import torch

from rl_objectives.value._checks import check_inputs
from rl_objectives.value._scan import reverse_linear_scan

__all__ = ["vtrace_advantage_estimate"]


def vtrace_advantage_estimate(
    gamma: float | torch.Tensor,
    log_pi: torch.Tensor,
    log_mu: torch.Tensor,
    state_value: torch.Tensor,
    next_state_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None = None,
    rho_thresh: float = 1.0,
    c_thresh: float = 1.0,
    *,
    time_dim: int = -2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets ``v_t`` and the policy-gradient advantage.

    With ``rho_t = min(rho_bar, pi/mu)``, ``c_t = min(c_bar, pi/mu)``::

        delta_t = rho_t (r_t + gamma (1 - m_t) V(s_{t+1}) - V(s_t))
        v_t - V(s_t) = delta_t + gamma c_t (1 - d_t) (v_{t+1} - V(s_{t+1}))
        A_t = rho_t (r_t + gamma (1 - m_t) v'_{t+1} - V(s_t))

    where ``v'_{t+1} = v_{t+1}`` inside a trajectory and ``V(s_{t+1})`` at a cut.

    Args:
        gamma: discount, float or tensor.
        log_pi: ``log pi(a_t|s_t)`` of the learner, shaped like ``reward``.
        log_mu: ``log mu(a_t|s_t)`` of the behaviour policy, same shape.
        state_value: ``V(s_t)``, shape ``[*B, T, *F]``.
        next_state_value: ``V(s_{t+1})``, same shape.
        reward: ``r_t``, same shape.
        done: ``d_t``, same shape.
        terminated: ``m_t``; ``done`` when ``None``.
        rho_thresh: ``rho_bar``, the clip of the importance weights in ``delta``.
        c_thresh: ``c_bar``, the clip of the trace coefficients.
        time_dim: the time dimension.

    Returns:
        ``(advantage, value_target)``, both shaped like ``reward``.

    Raises:
        ShapeMismatchError: the tensors' shapes differ.
        TimeDimError: ``time_dim`` is out of range.

    Examples:
        >>> import torch
        >>> z = torch.zeros(2, 1); r = torch.ones(2, 1); d = torch.zeros(2, 1, dtype=torch.bool)
        >>> adv, vs = vtrace_advantage_estimate(0.5, z, z, z, z, r, d)
        >>> vs.squeeze(-1)
        tensor([1.5000, 1.0000])
    """
    gamma, _, done, terminated, time_dim = check_inputs(
        gamma, None, reward, done, terminated, time_dim,
        log_pi=log_pi, log_mu=log_mu, state_value=state_value, next_state_value=next_state_value,
    )  # fmt: skip
    ratio = (log_pi - log_mu).detach().exp()
    rho = ratio.clamp_max(rho_thresh)
    discount = (~terminated).to(reward.dtype) * gamma
    delta = rho * (reward + discount * next_state_value - state_value)
    trace = (gamma * ratio.clamp_max(c_thresh) * (~done).to(reward.dtype)).expand_as(delta)
    correction = reverse_linear_scan(trace, delta, time_dim)  # v_t - V(s_t)
    value_target = state_value + correction
    after = correction.narrow(time_dim, 1, reward.shape[time_dim] - 1)
    after = torch.cat((after, torch.zeros_like(correction.narrow(time_dim, 0, 1))), time_dim)
    next_target = next_state_value + after * (~done).to(reward.dtype)
    advantage = rho * (reward + discount * next_target - state_value)
    return advantage, value_target
