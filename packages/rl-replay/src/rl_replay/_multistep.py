"""``MultiStep``: TorchRL's n-step return post-processing of a collector batch."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn

__all__ = ["MultiStep"]


def _shift(x: torch.Tensor, k: int, dim: int, fill: float | bool) -> torch.Tensor:
    """``x`` moved ``k`` steps back along ``dim`` (``out[t] = x[t + k]``), padded with ``fill``."""
    if k == 0:
        return x
    size = x.shape[dim]
    keep = x.narrow(dim, min(k, size), size - min(k, size))
    pad_shape = list(x.shape)
    pad_shape[dim] = min(k, size)
    return torch.cat([keep, torch.full(pad_shape, fill, dtype=x.dtype, device=x.device)], dim)


class MultiStep(nn.Module):
    """TorchRL's n-step return transform for a collector batch (``postproc=``).

    For each step ``t`` of a batch ``[*B, T]`` (time last), the reward becomes

    ``R_t = sum_{k=0}^{s_t - 1} gamma^k r_{t+k}``, with
    ``s_t = min(n_steps, steps to the end of t's episode, T - t)``

    (``n_steps`` rewards at most, as TorchRL's code counts them: ``n_steps=1`` keeps the
    1-step reward) and every ``"next"`` entry (observation, done, terminated, truncated,
    ...) is taken from step ``t + s_t - 1``, so ``("next", obs)`` is the observation
    ``s_t`` steps after ``t``. The rewards of the next episode never leak into ``R_t``. As
    in TorchRL it writes ``("next", "original_reward")`` (the 1-step reward) and, with the
    batch's shape ``[*B, T]``, ``"steps_to_next_obs"`` (``s_t``), ``"gamma"``
    (``gamma ** s_t``, the discount of the bootstrap value) and ``"nonterminal"``.
    Two deliberate differences from TorchRL: the done keys move with the observation
    (TorchRL keeps step ``t``'s, so a window that reaches a terminal state bootstraps from
    it), and ``"nonterminal"`` is ``not terminated`` at ``t + s_t - 1``, whether to
    bootstrap (TorchRL's is ``s_t > 1``). Like TorchRL's, it sees one batch only: the last
    steps of a batch are cut at the batch end (Sutton, 1988, "Learning to predict by the
    methods of temporal differences").

    Args:
        gamma: the discount factor, in ``(0, 1]``.
        n_steps: how many rewards to sum at most (an int ``>= 1``).

    Raises:
        ValueError: ``gamma`` outside ``(0, 1]`` or ``n_steps`` not an int ``>= 1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> done = torch.tensor([False, False, True, False, False]).unsqueeze(-1)
        >>> batch = TensorDict({"observation": torch.arange(5.).unsqueeze(-1), "next": {
        ...     "observation": torch.arange(1., 6.).unsqueeze(-1), "reward": torch.ones(5, 1),
        ...     "done": done, "terminated": done.clone()}}, batch_size=[5])
        >>> out = MultiStep(gamma=0.5, n_steps=2)(batch)
        >>> out["next", "reward"].squeeze(-1).tolist()
        [1.5, 1.5, 1.0, 1.5, 1.0]
        >>> out["steps_to_next_obs"].squeeze(-1).tolist()
        [2, 2, 1, 2, 1]
        >>> out["next", "observation"].squeeze(-1).tolist()
        [2.0, 3.0, 3.0, 5.0, 5.0]
    """

    def __init__(self, gamma: float, n_steps: int) -> None:
        super().__init__()
        if not isinstance(gamma, (int, float)) or not 0.0 < float(gamma) <= 1.0:
            raise ValueError(f"MultiStep: gamma must be a float in (0, 1], got {gamma!r}")
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f"MultiStep: n_steps must be an int >= 1, got {n_steps!r}")
        self.gamma = float(gamma)
        self.n_steps = n_steps

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Rewrite ``tensordict`` (batch ``[*B, T]``, time last) in place and return it.

        Raises:
            KeyError: the batch has no ``("next", "reward")`` or ``("next", "done")``.
            ValueError: the batch has no batch dimension (no time axis).
        """
        if tensordict.batch_dims < 1:
            raise ValueError("MultiStep: expected a batch [*B, T] with time last, got batch "
                             f"size {list(tensordict.batch_size)}")
        for key in ("reward", "done"):
            if ("next", key) not in tensordict.keys(True):
                raise KeyError(f"MultiStep: the batch has no ('next', {key!r}) entry")
        tdim = tensordict.batch_dims - 1
        batch_shape = tensordict.batch_size
        reward = tensordict.get(("next", "reward"))
        done = tensordict.get(("next", "done")).reshape(*batch_shape, -1).any(-1)
        alive = torch.ones_like(done)
        total = torch.zeros_like(reward)
        steps = torch.zeros(batch_shape, dtype=torch.int64, device=done.device)
        for k in range(self.n_steps):
            alive = alive & _shift(torch.ones_like(done), k, tdim, False)  # t + k < T
            mask = alive.reshape(*alive.shape, *[1] * (reward.ndim - alive.ndim))
            total = total + (self.gamma**k) * _shift(reward, k, tdim, 0.0) * mask
            steps = steps + alive.long()
            alive = alive & ~_shift(done, k, tdim, False)
        nxt = self._gather_next(tensordict.get("next"), steps - 1)
        nxt.set("original_reward", reward)
        nxt.set("reward", total)
        tensordict.set("next", nxt)
        tensordict.set("steps_to_next_obs", steps)  # [*B, T], as TorchRL's
        tensordict.set("gamma", torch.full(batch_shape, self.gamma, device=steps.device).pow(steps))
        terminal = nxt.get("terminated", nxt.get("done"))
        tensordict.set("nonterminal", ~terminal.reshape(*batch_shape, -1).any(-1))
        return tensordict

    @staticmethod
    def _gather_next(nxt: TensorDictBase, offset: torch.Tensor) -> TensorDictBase:
        """``nxt`` with row ``t`` replaced by row ``t + offset[t]`` along time (last dim)."""
        shape = nxt.batch_size
        steps = shape[-1]
        flat = nxt.reshape(-1, steps)
        target = (torch.arange(steps, device=offset.device) + offset).reshape(-1, steps)
        rows = torch.arange(flat.shape[0], device=offset.device).unsqueeze(-1).expand_as(target)
        return flat[rows, target].reshape(shape)
