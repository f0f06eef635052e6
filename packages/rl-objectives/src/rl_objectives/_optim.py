"""``group_optimizers``: several optimizers of one type as one, as TorchRL's."""

from __future__ import annotations

import torch

__all__ = ["group_optimizers"]


def group_optimizers(*optimizers: torch.optim.Optimizer | None) -> torch.optim.Optimizer:
    """One optimizer over the parameter groups of ``optimizers`` (``None`` skipped).

    TorchRL's ``torchrl.objectives.group_optimizers``: each group keeps its own
    hyperparameters (``lr``, ``betas``, ...); the new optimizer has the common type and a
    fresh state.

    Args:
        optimizers: optimizers of one type, or ``None``.

    Returns:
        An optimizer of that type over all their parameter groups.

    Raises:
        ValueError: optimizers of different types, or none at all.
        TypeError: an argument that is not a ``torch.optim.Optimizer``.

    Examples:
        >>> import torch
        >>> actor, critic = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> opt = group_optimizers(torch.optim.Adam(actor.parameters(), lr=1e-3),
        ...                        torch.optim.Adam(critic.parameters(), lr=1e-2))
        >>> type(opt).__name__, [g["lr"] for g in opt.param_groups]
        ('Adam', [0.001, 0.01])
    """
    given = [o for o in optimizers if o is not None]
    for o in given:
        if not isinstance(o, torch.optim.Optimizer):
            raise TypeError(
                f"group_optimizers: expected torch.optim.Optimizer arguments, received "
                f"{type(o).__name__}"
            )
    if not given:
        raise ValueError("group_optimizers: expected at least one optimizer, received none")
    kinds = sorted({type(o).__name__ for o in given})
    if len(kinds) > 1:
        raise ValueError(
            f"group_optimizers: expected optimizers of one type, received {', '.join(kinds)}"
        )
    return type(given[0])([group for o in given for group in o.param_groups])
