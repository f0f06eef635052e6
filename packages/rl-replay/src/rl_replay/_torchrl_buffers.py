"""``TensorStorage`` and ``PrioritizedReplayBuffer``: TorchRL's names for a storage over
given data and a prioritized buffer of any data (tensors or TensorDicts)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_replay._buffer import ReplayBuffer
from rl_replay._layout import batch_rows
from rl_replay._prioritized import PrioritizedSampler
from rl_replay._storage import LazyTensorStorage, ListStorage, Storage

__all__ = ["PrioritizedReplayBuffer", "TensorStorage"]


class TensorStorage(LazyTensorStorage):
    """A tensor storage filled with ``storage`` at construction (TorchRL's ``TensorStorage``).

    Its first ``ndim`` dims are the rows (``len(storage)`` of them, all counted as
    written); later writes must match its layout. The data is copied once into the
    storage's own tensors on ``device``.

    Args:
        storage: the data, a ``torch.Tensor`` or a ``TensorDict``.
        max_size: capacity in rows (default: the data's rows; at least that many).
        device: device of the stored tensors.
        ndim: leading dims counted as rows (1, or 2 for ``[envs, T]`` data).
        compilable: see :class:`LazyTensorStorage`.

    Raises:
        TypeError: ``storage`` is neither a Tensor nor a TensorDict.
        ValueError: ``max_size`` is smaller than the data.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> s = TensorStorage(TensorDict(obs=torch.randn(10, 11), batch_size=[10, 11]))
        >>> len(s), s.get(torch.tensor([0]))["obs"].shape
        (10, torch.Size([1, 11]))
    """

    def __init__(
        self,
        storage: Any,
        max_size: int | None = None,
        *,
        device: Any = "cpu",
        ndim: int = 1,
        compilable: bool = False,
    ) -> None:
        if not isinstance(storage, (torch.Tensor, TensorDictBase)):
            raise TypeError(
                f"storage: expected a torch.Tensor or a TensorDict, received "
                f"{type(storage).__name__}"
            )
        rows = batch_rows(storage, ndim)
        n = 1
        for r in rows:
            n *= r
        if max_size is None:
            max_size = n
        if max_size < n:
            raise ValueError(f"max_size: expected at least the data's {n} rows, got {max_size}")
        super().__init__(max_size, device=device, ndim=ndim, compilable=compilable)
        if ndim == 1:
            self.set(torch.arange(n), storage)
        else:
            self.set(torch.arange(rows[-1]), storage)


class PrioritizedReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` with a :class:`PrioritizedSampler` (TorchRL's
    ``PrioritizedReplayBuffer``); ``sample(return_info=True)`` gives the indices and
    importance weights that ``update_priority`` takes.

    Args:
        alpha: priority exponent.
        beta: importance-sampling exponent.
        eps: added to every priority.
        storage: the storage (default ``ListStorage(1000)``, as TorchRL); the sampler's
            tree covers its ``max_size``.
        **kwargs: the other :class:`ReplayBuffer` arguments (``batch_size``,
            ``collate_fn``, ``transform``, ``prefetch``, ...), not ``sampler``.

    Raises:
        ValueError: ``sampler`` is given (the buffer builds its own), or a bad value.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage
        >>> _ = torch.manual_seed(0)
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.9, storage=LazyTensorStorage(10))
        >>> _ = rb.extend(torch.arange(4))
        >>> rb.update_priority(torch.tensor([0, 1, 2]), torch.zeros(3))
        >>> rb.sample(8).tolist()
        [3, 3, 3, 3, 3, 3, 3, 3]
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        storage: Storage | None = None,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise ValueError("sampler: PrioritizedReplayBuffer builds its own PrioritizedSampler")
        storage = storage if storage is not None else ListStorage(1000)
        sampler = PrioritizedSampler(storage.max_size, alpha, beta, eps)
        super().__init__(storage=storage, sampler=sampler, **kwargs)
