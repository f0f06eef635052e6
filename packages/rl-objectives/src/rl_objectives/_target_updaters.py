"""Target-network updaters: Polyak averaging and periodic copies."""

from __future__ import annotations

import torch
from rl_profiling import profiled
from torch.nn.parameter import is_lazy

from rl_objectives._loss_base import LossModule

__all__ = ["HardUpdate", "SoftUpdate"]


def _check_targets(loss_module: LossModule) -> None:
    if not isinstance(loss_module, LossModule) or not loss_module.target_pairs():
        raise ValueError(
            "loss_module must be a LossModule with target networks (e.g. DQNLoss with "
            f"delay_value=True), got {type(loss_module).__name__}"
        )


def _ready_pairs(loss_module: LossModule) -> list[tuple[list, list]]:
    """The loss's ``(online, target)`` parameter lists, without the lazy parameters not yet
    initialised; a target still lazy whose online parameter is initialised is materialised
    as a copy of it (a policy of lazy modules runs once before its targets exist)."""
    pairs = []
    for online, target in loss_module.target_pairs():
        keep = [(o, t) for o, t in zip(online, target, strict=True) if not is_lazy(o)]
        for o, t in keep:
            if is_lazy(t):
                t.materialize(o.shape, device=o.device, dtype=o.dtype)
                t.copy_(o.detach())
        if keep:
            pairs.append(([o for o, _ in keep], [t for _, t in keep]))
    return pairs


class SoftUpdate:
    """Polyak averaging ``theta' <- (1 - tau) theta' + tau theta`` at every :meth:`step`.

    Give exactly one of ``tau`` and ``eps``, as TorchRL requires. Lazy parameters not yet
    initialised are skipped until they are (their target is then a copy).

    Args:
        loss_module: a loss holding target networks.
        tau: interpolation weight, in (0, 1].
        eps: TorchRL's other name for it: ``tau = 1 - eps``.

    Raises:
        ValueError: neither or both of ``tau``/``eps`` given, or out of range.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl_objectives import DQNLoss
        >>> loss = DQNLoss(TensorDictModule(torch.nn.Linear(2, 2), ["observation"],
        ...                                 ["action_value"]))
        >>> SoftUpdate(loss, tau=0.01).step()
    """

    def __init__(self, loss_module: LossModule, *, tau: float | None = None,
                 eps: float | None = None) -> None:
        if (tau is None) == (eps is None):
            raise ValueError(
                f"tau, eps: give exactly one of them (as TorchRL requires; e.g. tau=0.005), "
                f"received tau={tau}, eps={eps}"
            )
        tau = 1.0 - eps if tau is None else tau
        if not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        _check_targets(loss_module)
        self.loss_module, self.tau = loss_module, tau

    @profiled("SoftUpdate.step")
    @torch.no_grad()
    def step(self) -> None:
        """Move every target parameter towards its online parameter."""
        for online, target in _ready_pairs(self.loss_module):
            torch._foreach_lerp_(target, [p.detach() for p in online], self.tau)


class HardUpdate:
    """Copy the online parameters into the targets every ``value_network_update_interval`` steps.

    Args:
        loss_module: a loss holding target networks.
        value_network_update_interval: the period, in calls to :meth:`step`.

    Raises:
        ValueError: the period is not a positive int.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl_objectives import DQNLoss
        >>> loss = DQNLoss(TensorDictModule(torch.nn.Linear(2, 2), ["observation"],
        ...                                 ["action_value"]))
        >>> HardUpdate(loss, value_network_update_interval=2).step()
    """

    def __init__(self, loss_module: LossModule, *,
                 value_network_update_interval: int = 1000) -> None:
        if not isinstance(value_network_update_interval, int) or value_network_update_interval < 1:
            raise ValueError(
                "value_network_update_interval must be an int >= 1, got "
                f"{value_network_update_interval!r}"
            )
        _check_targets(loss_module)
        self.loss_module = loss_module
        self.value_network_update_interval = value_network_update_interval
        self.counter = 0

    @profiled("HardUpdate.step")
    @torch.no_grad()
    def step(self) -> None:
        """Count a step; copy the parameters when the period is reached."""
        self.counter += 1
        if self.counter % self.value_network_update_interval == 0:
            for online, target in _ready_pairs(self.loss_module):
                torch._foreach_copy_(target, [p.detach() for p in online])

    def state_dict(self) -> dict[str, int]:
        """The step counter (the target weights are in the loss module's state)."""
        return {"counter": self.counter}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restore :meth:`state_dict`: the next copy comes when it would have."""
        self.counter = int(state["counter"])
