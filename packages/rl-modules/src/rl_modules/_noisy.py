"""``NoisyLinear``: a linear layer with learned factorised Gaussian noise on its weights
(Fortunato et al., 2018, "Noisy Networks for Exploration", arXiv:1706.10295, sec. 3).

With ``f(x) = sign(x) sqrt(|x|)``, ``eps_in ~ N(0, I_p)`` and ``eps_out ~ N(0, I_q)``::

    W = mu_W + sigma_W * (f(eps_out) f(eps_in)^T)        [q, p]
    b = mu_b + sigma_b * f(eps_out)                      [q]
    y = x W^T + b                                        [*B, q]

``mu ~ U(-1/sqrt(p), 1/sqrt(p))``, ``sigma_W = std_init / sqrt(p)``,
``sigma_b = std_init / sqrt(q)``. The noise is a buffer: it changes only when
:meth:`NoisyLinear.reset_noise` is called; in eval mode the layer uses ``mu`` alone.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = ["NoisyLinear", "reset_noise"]


def _scaled_noise(n: int, like: torch.Tensor) -> torch.Tensor:
    x = torch.randn(n, device=like.device, dtype=like.dtype)
    return x.sign() * x.abs().sqrt()


class NoisyLinear(nn.Linear):
    """A linear layer with factorised Gaussian noise (NoisyNet), TorchRL's signature.

    Args:
        in_features: input size ``p``.
        out_features: output size ``q``.
        bias: learn a (noisy) bias.
        device: device of the parameters.
        dtype: dtype of the parameters.
        std_init: initial noise scale (``sigma = std_init / sqrt(fan)``).

    Raises:
        ValueError: ``std_init`` is negative.

    Examples:
        >>> import torch
        >>> layer = NoisyLinear(3, 2)
        >>> x = torch.randn(4, 3)
        >>> torch.equal(layer(x), layer(x))  # same noise until reset_noise()
        True
        >>> layer.reset_noise()
        >>> layer.eval()(x).shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
        std_init: float = 0.1,
    ) -> None:
        if not std_init >= 0:
            raise ValueError(f"std_init must be >= 0, got {std_init}")
        self.std_init = float(std_init)
        nn.Module.__init__(self)
        self.in_features, self.out_features = in_features, out_features
        kw = {"device": device, "dtype": dtype}
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features, **kw))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features, **kw))
        self.register_buffer("weight_epsilon", torch.zeros(out_features, in_features, **kw))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(out_features, **kw))
            self.bias_sigma = nn.Parameter(torch.empty(out_features, **kw))
            self.register_buffer("bias_epsilon", torch.zeros(out_features, **kw))
        else:
            self.bias_mu = self.bias_sigma = self.bias_epsilon = None
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """Re-draw ``mu`` uniformly and set ``sigma`` to ``std_init / sqrt(fan)``."""
        if not hasattr(self, "weight_mu"):  # nn.Linear.__init__ is not run
            return
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.std_init / math.sqrt(self.in_features))
            if self.bias_mu is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(self.std_init / math.sqrt(self.out_features))

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new ``eps_in``, ``eps_out`` (the only place the noise changes)."""
        eps_in = _scaled_noise(self.in_features, self.weight_epsilon)
        eps_out = _scaled_noise(self.out_features, self.weight_epsilon)
        self.weight_epsilon.copy_(torch.outer(eps_out, eps_in))
        if self.bias_epsilon is not None:
            self.bias_epsilon.copy_(eps_out)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        """``mu_W + sigma_W * eps_W`` in training mode, ``mu_W`` in eval mode."""
        if self.training:
            return self.weight_mu + self.weight_sigma * self.weight_epsilon
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor | None:  # type: ignore[override]
        """``mu_b + sigma_b * eps_b`` in training mode, ``mu_b`` in eval mode."""
        if self.bias_mu is None:
            return None
        if self.training:
            return self.bias_mu + self.bias_sigma * self.bias_epsilon
        return self.bias_mu

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(input, self.weight, self.bias)


def reset_noise(module: nn.Module) -> None:
    """Call ``reset_noise`` on every ``NoisyLinear`` inside ``module`` (TorchRL's helper).

    Args:
        module: any module.

    Examples:
        >>> import torch
        >>> reset_noise(torch.nn.Sequential(NoisyLinear(2, 2), torch.nn.ReLU()))
    """
    for sub in module.modules():
        if isinstance(sub, NoisyLinear):
            sub.reset_noise()
