"""TorchRL's DDPG networks (Lillicrap et al., 2016, arXiv:1509.02971, sec. 7).

``DdpgMlpActor``: ``observation -> MLP(400, 300, ELU) -> action`` (unbounded: squash it
with ``TanhModule`` or a ``TanhDelta`` actor). ``DdpgMlpQNet``: the observation goes
through one 400-wide layer, the action joins it, then a 300-wide layer and the value::

    Q(s, a) = MLP_2([ELU(W_1 s + b_1), a])

The last layer of each starts small (uniform in ``[-scale, scale]``, scale 6e-3 for the
actor and 6e-4 for the critic; bias 0), so the initial policy and values are near 0.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rl_modules._models import MLP

__all__ = ["DdpgMlpActor", "DdpgMlpQNet"]


def _init_last_layer(mlp: nn.Sequential, scale: float) -> None:
    last = [m for m in mlp.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.uniform_(-scale, scale)
        if last.bias is not None:
            last.bias.zero_()


def _list_sets_depth(kwargs: dict, given: dict | None) -> None:
    """A user's ``num_cells`` list sets the depth unless they gave one."""
    given = given or {}
    if isinstance(given.get("num_cells"), (list, tuple)) and "depth" not in given:
        kwargs["depth"] = None


class DdpgMlpActor(nn.Module):
    """DDPG's actor: an ``MLP`` (TorchRL's default 400x300, ELU) from observation to action.

    Args:
        action_dim: size of the action.
        mlp_net_kwargs: ``MLP`` arguments overriding the defaults (``in_features=None``
            makes a lazy first layer; give it to build eagerly).
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> actor = DdpgMlpActor(2, mlp_net_kwargs={"in_features": 3, "num_cells": [16, 16]})
        >>> actor(torch.randn(5, 3)).shape
        torch.Size([5, 2])
    """

    def __init__(self, action_dim: int, mlp_net_kwargs: dict | None = None,
                 device: Any = None) -> None:
        super().__init__()
        kwargs = {"in_features": None, "out_features": action_dim, "depth": 2,
                  "num_cells": [400, 300], "activation_class": nn.ELU, "bias_last_layer": True}
        kwargs.update(mlp_net_kwargs or {})
        _list_sets_depth(kwargs, mlp_net_kwargs)
        self.mlp = MLP(device=device, **kwargs)
        if kwargs["in_features"] is not None:
            _init_last_layer(self.mlp, 6e-3)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.mlp(observation)


class DdpgMlpQNet(nn.Module):
    """DDPG's critic: ``Q(s, a) = MLP_2([MLP_1(s), a])`` (TorchRL's 400 then 300, ELU).

    Args:
        mlp_net_kwargs_net1: ``MLP`` arguments of the observation layer (default: one
            400-wide layer, activated; ``in_features`` the observation size or ``None``).
        mlp_net_kwargs_net2: ``MLP`` arguments of the head (default: 300 then 1;
            ``in_features`` 400 + action size, or ``None``).
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> q = DdpgMlpQNet({"in_features": 3, "out_features": 8},
        ...                 {"in_features": 8 + 2, "num_cells": [8]})
        >>> q(torch.randn(5, 3), torch.randn(5, 2)).shape
        torch.Size([5, 1])
    """

    def __init__(self, mlp_net_kwargs_net1: dict | None = None,
                 mlp_net_kwargs_net2: dict | None = None, device: Any = None) -> None:
        super().__init__()
        kw1 = {"in_features": None, "out_features": 400, "depth": 0, "num_cells": [],
               "activation_class": nn.ELU, "bias_last_layer": True,
               "activate_last_layer": True}
        kw1.update(mlp_net_kwargs_net1 or {})
        kw2 = {"in_features": None, "out_features": 1, "depth": 1, "num_cells": [300],
               "activation_class": nn.ELU, "bias_last_layer": True}
        kw2.update(mlp_net_kwargs_net2 or {})
        _list_sets_depth(kw1, mlp_net_kwargs_net1)
        _list_sets_depth(kw2, mlp_net_kwargs_net2)
        self.mlp1, self.mlp2 = MLP(device=device, **kw1), MLP(device=device, **kw2)
        if kw2["in_features"] is not None:
            _init_last_layer(self.mlp2, 6e-4)

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.mlp2(torch.cat([self.mlp1(observation), action], -1))
