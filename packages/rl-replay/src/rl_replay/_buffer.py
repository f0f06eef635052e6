"""``ReplayBuffer``: a storage, a writer and a sampler behind one lock."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rl_profiling import profiled
from tensordict import TensorDictBase, is_tensorclass

from rl_replay._buffer_args import check_arguments
from rl_replay._buffer_transforms import chain_with, check_pin_memory
from rl_replay._checkpoint import dump_state, load_state
from rl_replay._keys import INDEX
from rl_replay._prefetch import Prefetcher
from rl_replay._samplers import RandomSampler, Sampler
from rl_replay._storage import LazyTensorStorage, ListStorage, Storage
from rl_replay._writers import RoundRobinWriter, Writer
from rl_replay.exceptions import ReplayBufferError

__all__ = ["ReplayBuffer"]

_PREFETCH_TIMEOUT_S = 30.0


class ReplayBuffer:
    """A replay buffer: ``extend`` rows in, ``sample`` batches out.

    One writer thread and any number of sampling threads may use a buffer at once: the
    write (data + cursor + new priorities) and the sample (indices + gather) each run
    under one lock, so a sample never sees a half-written row. A compilable buffer has
    no lock and is not thread-safe.

    Args:
        storage: where rows live; ``ListStorage(1000)`` by default.
        sampler: how indices are drawn; ``RandomSampler()`` by default.
        writer: where rows are written; ``RoundRobinWriter()`` by default.
        batch_size: default size of ``sample()``; required for iteration and prefetch.
        collate_fn: applied to the gathered rows (after the lock is released).
        transform: applied to each sample after ``collate_fn`` (more with
            :meth:`append_transform` / :meth:`insert_transform`).
        prefetch: keep this many samples ready in a background thread (needs
            ``batch_size``); samples may be one update behind on priorities.
        generator: random generator of the sampler (one seeded from torch's global RNG
            is created by default, so ``torch.manual_seed`` makes sampling reproducible).
        compilable: make ``extend``, ``sample`` and ``update_priority`` traceable by
            ``torch.compile(fullgraph=True)``: the storage, writer and sampler are
            switched to their compilable mode (counters and cursor as tensors, no host
            sync), there is no lock (the buffer is not thread-safe), and samples draw
            from torch's global RNG on the storage's device (a ``torch.Generator``
            cannot be traced). The default storage is then
            ``LazyTensorStorage(1000, compilable=True)``. See ``docs/replay.md``.
        pin_memory: pin each sample's memory (TorchRL's argument), for a copy to a CUDA
            device that reads it without a staging copy; ``True`` needs CUDA.

    Raises:
        ValueError: an argument has the wrong type or value, or a component cannot be
            compilable.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4)
        >>> rb.extend(torch.arange(10)).shape
        torch.Size([10])
        >>> rb.sample().shape, len(rb)
        (torch.Size([4]), 10)
        >>> crb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, compilable=True)
        >>> crb.extend(torch.arange(10)), crb.storage.count()
        (tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]), tensor(10))
    """

    def __init__(
        self,
        *,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
        writer: Writer | None = None,
        batch_size: int | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        transform: Callable[[Any], Any] | None = None,
        prefetch: int | None = None,
        generator: torch.Generator | None = None,
        compilable: bool = False,
        pin_memory: bool = False,
    ) -> None:
        self.compilable = check_arguments(
            storage, sampler, writer, batch_size, prefetch, compilable, generator
        )
        self._pin_memory = check_pin_memory(pin_memory)
        if storage is None:
            storage = LazyTensorStorage(1000, compilable=True) if compilable else ListStorage(1000)
        self._storage = storage
        self._sampler = sampler if sampler is not None else RandomSampler()
        self._writer = writer if writer is not None else RoundRobinWriter()
        self._writer.register_storage(self._storage)
        if compilable:
            for component in (self._storage, self._writer, self._sampler):
                component._make_compilable()
        if hasattr(self._sampler, "attach"):
            self._sampler.attach(self._storage)
        self._batch_size, self._collate_fn, self._transform = batch_size, collate_fn, transform
        self._prefetch_depth = prefetch
        self._prefetcher: Prefetcher | None = None
        self._tensorclass: type | None = None  # the @tensorclass extended, stored as its td
        if generator is None and not compilable:
            generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
        self._generator = generator
        # torch.compile cannot trace a lock: a compilable buffer is not thread-safe
        self._lock = contextlib.nullcontext() if compilable else threading.RLock()

    @property
    def storage(self) -> Storage:
        """The storage."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler."""
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer."""
        return self._writer

    @property
    def batch_size(self) -> int | None:
        """Default sample size."""
        return self._batch_size

    def __len__(self) -> int:
        return len(self._storage)

    def __getitem__(self, index: int | slice | torch.Tensor | Any) -> Any:
        """The stored rows at ``index`` (TorchRL's ``rb[index]``), without sampling.

        Positions count the rows stored, ``0 <= i < len(rb)``, in storage order (a full
        ring buffer wraps: position 0 is the oldest slot, not the oldest row). An int
        gives one row, a slice, a list or an integer tensor a batch; ``collate_fn``
        (batches only) and ``transform`` apply as for :meth:`sample`. The sampler is not
        touched and no ``"index"`` entry is added.

        Raises:
            IndexError: a position is outside ``[-len(rb), len(rb))``.
            TypeError: ``index`` is not an int, a slice or a sequence of ints.
        """
        n = len(self)
        single = isinstance(index, int) or (isinstance(index, torch.Tensor) and index.ndim == 0)
        if isinstance(index, slice):
            ranks = torch.arange(n)[index]
        elif isinstance(index, (list, tuple)) and not index:
            ranks = torch.zeros(0, dtype=torch.long)
        else:
            ranks = torch.as_tensor(index)
        if isinstance(index, bool) or ranks.dtype.is_floating_point or ranks.dtype == torch.bool:
            raise TypeError(f"index: expected an int, a slice or integer positions, got {index!r}")
        ranks = ranks.reshape(-1)
        if ranks.numel() and (int(ranks.min()) < -n or int(ranks.max()) >= n):
            bad = int(ranks.max()) if int(ranks.max()) >= n else int(ranks.min())
            raise IndexError(f"index: position {bad} is out of range for a buffer of {n} rows")
        ranks = torch.where(ranks < 0, ranks + n, ranks)
        with self._lock:
            data = self._as_stored(self._storage.get(self._storage.valid_flat(ranks)))
        if single:
            data = data[0]
        elif self._collate_fn is not None:
            data = self._collate_fn(data)
        return self._transform(data) if self._transform is not None else data

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(storage={type(self._storage).__name__}, "
            f"sampler={type(self._sampler).__name__}, writer={type(self._writer).__name__}, "
            f"len={len(self)}, batch_size={self._batch_size})"
        )

    @profiled("ReplayBuffer.extend")
    def extend(self, data: Any) -> torch.Tensor:
        """Write a block of rows; return their flat storage indices.

        A ``@tensorclass`` instance is stored as its TensorDict and read back (``sample``,
        ``rb[index]``) as that class, as in TorchRL.

        Raises:
            StorageLayoutError: keys, shapes or dtypes differ from the stored data (the
                buffer is left unchanged).
            ReplayBufferError: a tensorclass other than the one stored.
        """
        cls = None
        if is_tensorclass(data):
            cls, data = self._tensorclass_data(data)
        with self._lock:
            index = self._writer.extend(data)
            self._sampler.extend(index)
        if cls is not None:  # only once the rows are written
            self._tensorclass = cls
        return index

    def _tensorclass_data(self, data: Any) -> tuple[type, TensorDictBase]:
        cls = type(data)
        if self._tensorclass not in (None, cls):
            raise ReplayBufferError(
                f"data: expected a {self._tensorclass.__name__} like the stored data, "
                f"received a {cls.__name__}"
            )
        return cls, data.to_tensordict()

    def _as_stored(self, data: Any) -> Any:
        """Rows read back: the extended tensorclass again, when one was stored."""
        if self._tensorclass is None or not isinstance(data, TensorDictBase):
            return data
        return self._tensorclass.from_tensordict(data)

    def add(self, data: Any) -> int:
        """Write one row; return its flat storage index."""
        if isinstance(self._storage, ListStorage):
            return int(self.extend([data])[0])
        if self._storage.ndim != 1:
            raise ReplayBufferError("add: expected an ndim=1 storage; use extend for ndim=2")
        return int(self.extend(data.unsqueeze(0))[0])

    @profiled("ReplayBuffer.sample")
    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Draw a batch.

        Args:
            batch_size: rows to draw; the constructor's ``batch_size`` when ``None``.
            return_info: also return the info dict (``"index"`` and, for a prioritized
                sampler, ``"priority_weight"``).

        Returns:
            The batch, or ``(batch, info)``.

        Raises:
            EmptyBufferError: nothing is stored, or more rows than stored are asked for
                without replacement.
        """
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError("batch_size: expected an int, since the buffer has none set")
            if self._prefetch_depth:
                data, info = self._prefetched()
                return (data, info) if return_info else data
            batch_size = self._batch_size
        data, info = self._sample(batch_size)
        return (data, info) if return_info else data

    def _prefetched(self) -> tuple[Any, dict]:
        if self._prefetcher is None:
            self._prefetcher = Prefetcher(self._produce, self._prefetch_depth)
        return self._prefetcher.get(_PREFETCH_TIMEOUT_S)

    def _produce(self) -> tuple[Any, dict] | None:
        if len(self._storage) == 0:
            return None
        return self._sample(self._batch_size)

    def _sample(self, batch_size: int) -> tuple[Any, dict]:
        with self._lock:
            index, info = self._sampler.sample(self._storage, batch_size, self._generator)
            data = self._as_stored(self._gather(index, info))
        info[INDEX] = index
        data = self._postprocess(data, info)
        if self._collate_fn is not None:
            data = self._collate_fn(data)
        if self._transform is not None:
            data = self._transform(data)
        if self._pin_memory:
            data = data.pin_memory()
        return data, info

    def append_transform(self, transform: Callable[[Any], Any], *,
                         invert: bool = False) -> ReplayBuffer:
        """Apply ``transform`` to each sample after the transforms already set (TorchRL's
        ``append_transform``; ``invert=True``, a transform on writes, is refused).

        Returns:
            This buffer.
        """
        self._transform = chain_with(self._transform, transform, None, invert,
                                     "append_transform")
        return self

    def insert_transform(self, index: int, transform: Callable[[Any], Any], *,
                         invert: bool = False) -> ReplayBuffer:
        """Apply ``transform`` at position ``index`` among the sample transforms (TorchRL's
        ``insert_transform``). Returns this buffer."""
        self._transform = chain_with(self._transform, transform, index, invert,
                                     "insert_transform")
        return self

    def _gather(self, index: torch.Tensor, info: dict) -> Any:
        """Read the sampled rows (under the lock)."""
        return self._storage.get(index)

    def _postprocess(self, data: Any, info: dict) -> Any:
        return data

    @profiled("ReplayBuffer.update_priority")
    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Set the priorities of rows ``index`` (prioritized samplers only).

        Raises:
            InvalidPriorityError: a priority is negative, NaN or infinite.
            ReplayBufferError: the sampler has no priorities.
        """
        if not hasattr(self._sampler, "update_priority"):
            raise ReplayBufferError(
                "update_priority: expected a prioritized sampler, got "
                f"{type(self._sampler).__name__}"
            )
        with self._lock:
            self._sampler.update_priority(index, priority)

    update_priorities = update_priority

    def __iter__(self) -> Iterator[Any]:
        """Yield batches until the sampler's epoch ends (forever for ``RandomSampler``)."""
        if self._batch_size is None:
            raise ValueError("batch_size: iteration needs a buffer with batch_size set")
        while True:
            yield self._sample(self._batch_size)[0]
            if self._sampler.ran_out:
                return

    def empty(self) -> None:
        """Forget every row, the cursor and the priorities."""
        with self._lock:
            self._close_prefetch()
            self._storage.empty()
            self._writer.empty()
            self._sampler.empty()

    def _close_prefetch(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
            self._prefetcher = None

    def close(self) -> None:
        """Stop the prefetch thread, if any."""
        self._close_prefetch()

    def __del__(self) -> None:
        if getattr(self, "_prefetcher", None) is not None:
            self._prefetcher.close()

    def state_dict(self) -> dict:
        """Storage, writer cursor, sampler state (priorities) and RNG state."""
        with self._lock:
            return {
                "storage": self._storage.state_dict(),
                "writer": self._writer.state_dict(),
                "sampler": self._sampler.state_dict(),
                "rng": None if self._generator is None else self._generator.get_state(),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        with self._lock:
            self._storage.load_state_dict(state["storage"])
            self._writer.load_state_dict(state["writer"])
            self._sampler.load_state_dict(state["sampler"])
            if self._generator is not None and state["rng"] is not None:
                self._generator.set_state(state["rng"])

    @profiled("ReplayBuffer.dumps")
    def dumps(self, path: Any, base: Any = None, *, keep: int = 2) -> None:
        """Write an atomic, verified checkpoint to directory ``path`` (``docs/checkpointing.md``).

        Interrupted at any point, even by SIGKILL, the previous checkpoint at ``path``
        still loads; the ``keep`` newest are kept. A tensor storage's rows are written in
        chunks; a chunk unchanged since the base snapshot (the newest under ``base``, by
        default the one before ``path``'s newest, so the newest and its fallback never
        share a file) is a hard link to that snapshot's file, so a dump costs what changed.

        Raises:
            CheckpointError: an OS failure (full disk, file size limit) naming the path,
                the bytes wanted and the cause; the previous checkpoint is untouched.
        """
        with self._lock:
            dump_state(self, path, base, keep)

    @profiled("ReplayBuffer.loads")
    def loads(self, path: Any, *, checksum: bool = False) -> None:
        """Load the newest intact checkpoint from directory ``path``.

        ``state.pt`` is checked by checksum, chunk files by size (``checksum=True``: by
        checksum too). A newer snapshot that fails the check is skipped with a
        ``RuntimeWarning`` naming it and why.

        Raises:
            CheckpointError: ``path`` holds no intact checkpoint.
        """
        with self._lock:
            load_state(self, path, checksum=checksum)

