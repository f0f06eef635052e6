"""TensorDict replay buffers: the sample carries its ``"index"`` (and weights)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rl_replay._buffer import ReplayBuffer
from rl_replay._keys import INDEX, TD_ERROR
from rl_replay._prioritized import PrioritizedSampler
from rl_replay._storage import LazyTensorStorage, Storage
from rl_replay.exceptions import ReplayBufferError

__all__ = ["TensorDictPrioritizedReplayBuffer", "TensorDictReplayBuffer"]


class TensorDictReplayBuffer(ReplayBuffer):
    """A :class:`ReplayBuffer` of TensorDicts whose samples hold ``"index"``.

    The sample also holds what the sampler reports: ``"priority_weight"`` for a
    prioritized sampler; ``"is_init"`` (and truncation) marks for a ``SliceSampler``.
    ``"index"`` is the flat storage index (``env * capacity_t + t`` for ``ndim=2``), the
    one ``update_priority`` takes. Takes the same arguments as :class:`ReplayBuffer`;
    the default storage is ``LazyTensorStorage(1000)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, SamplerWithoutReplacement
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100),
        ...     sampler=SamplerWithoutReplacement(), batch_size=5)
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(10, 4)}, [10]))
        >>> batch = rb.sample()
        >>> batch["obs"].shape, batch["index"].shape
        (torch.Size([5, 4]), torch.Size([5]))
    """

    def __init__(self, *, storage: Storage | None = None, **kwargs: Any) -> None:
        super().__init__(
            storage=storage if storage is not None else LazyTensorStorage(1000), **kwargs
        )
        self._annotate = getattr(self._sampler, "annotate", None)
        # the storage builds the sample with "index" and the sampler's info in one go
        self._extra_in_get = self._storage.takes_extra and self._annotate is None

    def _gather(self, index: torch.Tensor, info: dict) -> Any:
        if not self._extra_in_get:
            return self._storage.get(index)
        extra = {INDEX: index}
        for key, value in info.items():
            if not key.startswith("_"):  # one value per row, on the storage's device
                extra[key] = value
        return self._storage.get(index, extra)

    def _postprocess(self, data: Any, info: dict) -> Any:
        if type(data) is not TensorDict and not isinstance(data, TensorDictBase):
            raise ReplayBufferError(
                f"sample: expected the storage to hold TensorDicts, got {type(data).__name__}"
            )
        if self._extra_in_get:
            return data
        annotate = self._annotate
        if annotate is not None:
            data.set(INDEX, info[INDEX])
            annotate(data, info)
            return data
        for key, value in info.items():
            if not key.startswith("_"):
                # the sampler made these: one value per row, on the storage's device
                data._set_str(key, value, inplace=False, validated=True)
        return data


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A TensorDict buffer with a :class:`PrioritizedSampler` over its storage.

    ``update_tensordict_priority(td)`` reads ``td["index"]`` and ``td[priority_key]``
    (a multi-element priority per row is reduced with its max) and updates the tree.

    Args:
        alpha: priority exponent.
        beta: importance-sampling exponent.
        eps: added to every priority.
        priority_key: key read by :meth:`update_tensordict_priority`.
        storage: the storage (default ``LazyTensorStorage(1000)``); the tree covers its
            ``max_size``.
        **kwargs: the other :class:`ReplayBuffer` arguments (not ``sampler``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5,
        ...     storage=LazyTensorStorage(100), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.randn(10, 4)}, [10]))
        >>> td = rb.sample()
        >>> td["td_error"] = torch.rand(4)
        >>> rb.update_tensordict_priority(td)
        >>> td["priority_weight"].shape
        torch.Size([4])
    """

    def __init__(
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        priority_key: Any = TD_ERROR,
        storage: Storage | None = None,
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise ValueError("sampler: TensorDictPrioritizedReplayBuffer builds its own")
        storage = storage if storage is not None else LazyTensorStorage(1000)
        sampler = PrioritizedSampler(storage.max_size, alpha, beta, eps)
        super().__init__(storage=storage, sampler=sampler, **kwargs)
        self.priority_key = priority_key

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from ``data["index"]`` and ``data[priority_key]``.

        Raises:
            KeyError: ``data`` lacks ``"index"`` or the priority key.
            InvalidPriorityError: a priority is negative, NaN or infinite.
        """
        for key in (INDEX, self.priority_key):
            if key not in data.keys(True):
                raise KeyError(f"data: expected key {key!r} (got keys {list(data.keys(True))})")
        index = data.get(INDEX).reshape(-1)
        priority = data.get(self.priority_key).detach()
        if priority.numel() != index.numel():
            priority = priority.reshape(index.numel(), -1).amax(1)
        self.update_priority(index, priority.to(torch.float64).reshape(-1))
