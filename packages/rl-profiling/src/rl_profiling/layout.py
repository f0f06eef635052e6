"""One description of a batch's layout (stdlib only): keys, dtypes, event shapes, time.

rl-envs' ``RolloutWriter`` (which allocates a rollout's storage), rl-collectors'
``FlatLayout`` (which packs a batch or a set of weights into one byte buffer for
torch.distributed) and rl-replay's storage ``Layout`` (which checks every write and rebuilds
sampled rows) all describe a TensorDict the same way. rl-replay may not import rl-envs or
rl-collectors, and the one package all three depend on is rl-profiling, the root of the
graph, so the description lives here as plain data, and :meth:`BatchLayout.of` is the one
function that reads it off a TensorDict (``docs/architecture.md``). It needs no torch: it
only calls ``keys(True, True)``, ``get``, ``batch_size`` and each leaf's ``dtype`` and
``shape``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["TIME", "BatchLayout", "key_str"]

TIME = "time"
"""The name of a batch's time dim, TorchRL's mark (``td.refine_names(..., "time")``): set by
the storage rl-envs' ``RolloutWriter`` allocates, read by rl-objectives' estimators."""


def key_str(key: Any) -> str:
    """A leaf key as one dotted string: ``("next", "obs")`` -> ``"next.obs"``."""
    return ".".join(key) if isinstance(key, tuple) else str(key)


@dataclass(frozen=True)
class BatchLayout:
    """What a batch holds: its batch dims, and each leaf's key, dtype and event shape.

    Plain, picklable data: a process, a storage or an estimator can be given it instead of
    deriving it again from the tensors.

    Attributes:
        batch_size: the batch dims (``[*B, T]`` for a collector's batch, ``[T, *B]`` for
            ``EnvBase.rollout``'s storage, ``[N]`` for rows of a replay storage).
        keys: each leaf's key as a tuple of strings (``("next", "observation")``), sorted by
            their dotted form, so the same TensorDict always gives the same order.
        dtypes: each leaf's dtype, as the leaf reports it (``torch.float32``).
        shapes: each leaf's event shape, the dims after the batch dims.
        time_dim: which batch dim is time, or ``None`` (a replay row, a set of weights).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_profiling.layout import BatchLayout
        >>> td = TensorDict({"obs": torch.zeros(2, 5, 4),
        ...                  "next": {"reward": torch.zeros(2, 5, 1)}}, [2, 5])
        >>> layout = BatchLayout.of(td, time_dim=1)
        >>> layout.keys, layout.shapes, layout.steps
        ((('next', 'reward'), ('obs',)), ((1,), (4,)), 5)
        >>> BatchLayout.of(td, batch_dims=1).shapes  # rows of [2]: time is part of a row
        ((5, 1), (5, 4))
    """

    batch_size: tuple[int, ...]
    keys: tuple[tuple[str, ...], ...]
    dtypes: tuple[Any, ...]
    shapes: tuple[tuple[int, ...], ...]
    time_dim: int | None = None

    @classmethod
    def of(cls, data: Any, batch_dims: int | None = None,
           time_dim: int | None = None) -> BatchLayout:
        """The layout of the TensorDict ``data``.

        Args:
            data: a TensorDict (anything with ``keys(True, True)``, ``get`` and
                ``batch_size`` whose leaves have ``dtype`` and ``shape``).
            batch_dims: how many leading dims are batch dims; by default all of
                ``data.batch_size``.
            time_dim: which of them is time, if any.

        Returns:
            The layout, keys sorted by their dotted form.

        Raises:
            TypeError: a leaf is not a tensor (it has no ``dtype`` or ``shape``).
            ValueError: ``time_dim`` is not one of the batch dims.
        """
        batch = tuple(data.batch_size)
        batch_dims = len(batch) if batch_dims is None else batch_dims
        if time_dim is not None and not 0 <= time_dim < batch_dims:
            raise ValueError(f"time_dim: expected 0 <= time_dim < {batch_dims} (the batch "
                             f"dims), received {time_dim}")
        keys = sorted(data.keys(True, True), key=key_str)
        dtypes, shapes = [], []
        for key in keys:
            leaf = data.get(key)
            if not (hasattr(leaf, "dtype") and hasattr(leaf, "shape")):
                raise TypeError(f"data[{key_str(key)!r}]: expected a Tensor leaf, got "
                                f"{type(leaf).__name__}")
            dtypes.append(leaf.dtype)
            shapes.append(tuple(leaf.shape[batch_dims:]))
        return cls(batch[:batch_dims], tuple((k,) if isinstance(k, str) else tuple(k)
                                             for k in keys),
                   tuple(dtypes), tuple(shapes), time_dim)

    @property
    def steps(self) -> int:
        """Length of the time dim.

        Raises:
            ValueError: the layout has no time dim.
        """
        if self.time_dim is None:
            raise ValueError("BatchLayout.steps: this layout has no time dim (time_dim=None)")
        return self.batch_size[self.time_dim]

    def full_shapes(self) -> tuple[tuple[int, ...], ...]:
        """Each leaf's whole shape, batch dims first."""
        return tuple((*self.batch_size, *s) for s in self.shapes)
