"""The dims of ``ObservationNorm.init_stats`` (TorchRL's ``reduce_dim`` / ``cat_dim`` /
``keep_dims``) and the statistics they select."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["StatDims"]


class StatDims:
    """Validated dims of a rollout ``[*B, T, *event]`` (TorchRL's layout, here too).

    The sample dims ``[*B, T]`` are always all reduced (``reduce_dim`` names a leading
    range of them, ``0`` or ``(0, 1)``, as TorchRL's calls do); ``reduce_dim`` may also name
    event dims (negative, or counted past the sample dims), reduced too; ``keep_dims``
    (a subset of ``reduce_dim``) keeps a reduced dim as size 1. Dims are resolved to
    negative indices, as TorchRL does.

    Examples:
        >>> dims = StatDims((0, 1, 2), 0, (0,), sample_dims=1, event_dims=3)
        >>> obs = torch.arange(24.0).reshape(2, 1, 3, 4)  # [T, C, H, W]
        >>> loc, std = dims.stats(obs)
        >>> tuple(loc.shape), loc.tolist()
        ((1, 4), [[10.0, 11.0, 12.0, 13.0]])
    """

    def __init__(self, reduce_dim: Any, cat_dim: Any, keep_dims: Any, *, sample_dims: int,
                 event_dims: int) -> None:
        ndim = sample_dims + event_dims
        dims = (reduce_dim,) if isinstance(reduce_dim, int) else tuple(reduce_dim)
        ok = bool(dims) and all(isinstance(d, int) and -event_dims <= d < ndim for d in dims)
        neg = sorted({d - ndim if d >= 0 else d for d in dims}) if ok else []
        lead = [d + ndim for d in neg if d + ndim < sample_dims]
        if not ok or len(neg) != len(dims) or lead != list(range(len(lead))) or not lead:
            raise ValueError(
                f"init_stats: reduce_dim: expected 0 or leading sample dims such as (0, 1) (at "
                f"most {sample_dims}: env and time), optionally with observation dims after "
                f"them, got {reduce_dim!r}"
            )
        if not isinstance(cat_dim, int) or cat_dim not in dims:
            raise ValueError(
                f"init_stats: cat_dim: expected one of reduce_dim={reduce_dim!r}, got {cat_dim!r}"
            )
        keep = () if keep_dims is None else tuple(keep_dims)
        keep_neg = {d - ndim if isinstance(d, int) and d >= 0 else d for d in keep}
        if not keep_neg <= set(neg):
            raise ValueError(
                f"init_stats: keep_dims: expected dims of reduce_dim={reduce_dim!r}, "
                f"got {keep_dims!r}"
            )
        self.reduced = sorted({*neg, *range(-ndim, sample_dims - ndim)})
        self.kept = keep_neg

    def stats(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and standard deviation of ``obs`` over the reduced dims, kept ones as 1."""
        loc = obs.mean(self.reduced, keepdim=True)
        std = obs.std(self.reduced, keepdim=True)
        for d in self.reduced:  # ascending negative dims: squeezing keeps the next index
            if d not in self.kept:
                loc, std = loc.squeeze(d), std.squeeze(d)
        return loc, std
