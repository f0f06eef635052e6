"""``BatchRenorm1d``: batch renormalisation (Ioffe, 2017, arXiv:1702.03275, Alg. 1), the
normalisation layer of CrossQ's critics (Bhatt et al., 2024, ICLR, arXiv:1902.05605).

Over the batch dims of ``x`` ``[*B, C]`` (every dim but the last), with running statistics
``mu``, ``sigma^2`` and ``eps``::

    mu_B = mean(x),  sigma_B = sqrt(var(x) + eps)          (biased variance)
    r = clip(sg(sigma_B) / sqrt(sigma^2 + eps), 1/max_r, max_r)
    d = clip((sg(mu_B) - mu) / sqrt(sigma^2 + eps), -max_d, max_d)
    y = weight ((x - mu_B) / sigma_B * r + d) + bias        (train)
    y = weight (x - mu) / sqrt(sigma^2 + eps) + bias         (eval)
    mu <- mu + momentum (mu_B - mu),  sigma^2 <- sigma^2 + momentum (var(x) - sigma^2)

For the first ``warmup_steps`` training calls ``r = 1, d = 0``: plain batch norm (with
``smooth=True`` they move linearly from ``(1, 0)`` to their clipped values instead).
``sg`` is stop-gradient. The warm-up is decided with tensor ops, not a Python branch, so
the layer runs under ``torch.vmap`` (stacked critics) and ``torch.compile``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BatchRenorm1d"]


class BatchRenorm1d(nn.Module):
    """Batch renormalisation over the last dim (TorchRL's signature and defaults).

    Args:
        num_features: size ``C`` of the last dim.
        momentum: weight of a batch in the running statistics.
        eps: added to the variances.
        max_r: bound of the scale correction ``r`` (in ``[1/max_r, max_r]``).
        max_d: bound of the shift correction ``d`` (in ``[-max_d, max_d]``).
        warmup_steps: training calls that behave as batch norm (``r = 1, d = 0``).
        smooth: blend linearly from batch norm to batch renorm over the warm-up.
        device: device of the parameters and statistics (``MLP(norm_class=...)`` passes it).

    Raises:
        ValueError: a hyper-parameter out of range.

    Examples:
        >>> import torch
        >>> bn = BatchRenorm1d(3, warmup_steps=2)
        >>> y = bn(torch.randn(16, 3))                 # training: batch statistics
        >>> int(bn.num_batches_tracked), bn.eval()(torch.randn(5, 3)).shape
        (1, torch.Size([5, 3]))
    """

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.01,
        eps: float = 1e-5,
        max_r: float = 3.0,
        max_d: float = 5.0,
        warmup_steps: int = 10000,
        smooth: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("num_features", num_features), ("warmup_steps", warmup_steps + 1)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"momentum must be in (0, 1], got {momentum}")
        if not (eps > 0 and max_r >= 1 and max_d >= 0):
            raise ValueError(f"need eps > 0, max_r >= 1, max_d >= 0; got {eps}, {max_r}, {max_d}")
        self.num_features, self.momentum, self.eps = num_features, momentum, eps
        self.max_r, self.max_d = max_r, max_d
        self.warmup_steps, self.smooth = warmup_steps, smooth
        self.weight = nn.Parameter(torch.ones(num_features, device=device))
        self.bias = nn.Parameter(torch.zeros(num_features, device=device))
        self.register_buffer("running_mean", torch.zeros(num_features, device=device))
        self.register_buffer("running_var", torch.ones(num_features, device=device))
        self.register_buffer("num_batches_tracked",
                             torch.zeros((), dtype=torch.long, device=device))

    def reset_parameters(self) -> None:
        """Weight 1, bias 0, running statistics and the step count reset."""
        with torch.no_grad():
            self.weight.fill_(1.0)
            self.bias.zero_()
            self.running_mean.zero_()
            self.running_var.fill_(1.0)
            self.num_batches_tracked.zero_()

    def _warmup_weight(self) -> torch.Tensor:
        """1 while warming up (or the smooth blend), 0 after: the share of plain batch norm."""
        steps = self.num_batches_tracked.to(self.running_mean.dtype)
        if self.smooth:
            return (1.0 - steps / self.warmup_steps).clamp(min=0.0)
        return (steps < self.warmup_steps).to(self.running_mean.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.num_features:
            raise ValueError(
                f"BatchRenorm1d: expected the last dim of size {self.num_features}, "
                f"received shape {tuple(x.shape)}"
            )
        if not self.training:  # y = x * scale + shift, per feature
            scale = self.weight * torch.rsqrt(self.running_var + self.eps)
            return torch.addcmul(self.bias - self.running_mean * scale, x, scale)
        dims = tuple(range(x.ndim - 1))
        # two passes (mean, then the centred squares): on the CPU several times faster than
        # torch.var_mean over the batch dims, and the centred x is needed below anyway
        mean = x.mean(dims)
        centred = x - mean
        var = (centred * centred).mean(dims)
        running_inv_std = torch.rsqrt(self.running_var + self.eps)
        with torch.no_grad():  # sg(): r and d carry no gradient
            r = (torch.sqrt(var + self.eps) * running_inv_std).clamp(1.0 / self.max_r,
                                                                       self.max_r)
            d = ((mean - self.running_mean) * running_inv_std).clamp(-self.max_d, self.max_d)
            w = self._warmup_weight()
            r, d = w + (1.0 - w) * r, (1.0 - w) * d
            self.running_mean.add_(self.momentum * (mean - self.running_mean))
            self.running_var.add_(self.momentum * (var - self.running_var))
            self.num_batches_tracked.add_(1)
        # weight ((x - mu_B) / sigma_B * r + d) + bias as one multiply-add over the centred
        # x: the per-feature scale carries the gradient through sigma_B (and mu_B, centred)
        scale = self.weight * torch.rsqrt(var + self.eps) * r
        return torch.addcmul(self.bias + self.weight * d, centred, scale)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, momentum={self.momentum}, max_r={self.max_r}, "
                f"max_d={self.max_d}, warmup_steps={self.warmup_steps}")
