"""``RolloutWriter``: the storage of ``T`` steps and the copy pairs that fill it, step by step.

One writer for both rollout loops: ``EnvBase.rollout`` stores time-major (``time_dim=0``,
``[T, *B]``, one contiguous copy per leaf and step) and the collectors time-last
(``time_dim=len(B)``, ``[*B, T]``, the data model's layout); ``docs/architecture.md``
says why each. The writer allocates the storage once and builds, once, the
``(destination, source)`` pairs a loop copies each step: numpy views when both sides are
on the CPU (a numpy slice assignment costs a fraction of ``Tensor.copy_``), the tensors
elsewhere. A destination is the storage leaf with time moved first, so ``dst[t]`` is step
``t``'s slot whatever the layout; the loop does ``dst[t] = src`` (and
``dst[t].copy_(td.get(key))`` for the keyed pairs).
"""

from __future__ import annotations

import copy
import mmap
import sys
from typing import Any

import numpy as np
import torch
from rl_profiling.layout import TIME, BatchLayout
from tensordict import TensorDict, TensorDictBase

__all__ = ["RolloutWriter", "empty_cpu"]


POOL_MIN_BYTES = 256 << 10
"""CPU leaves at least this big come from the mapping pool below (Linux)."""
POOL_MAX_BYTES = 1 << 30
"""Upper bound on the memory the pool keeps mapped for reuse."""
_POOL: dict[int, list[mmap.mmap]] = {}
SLAB_BYTES = 64 << 10
"""Small CPU batches (an off-policy loop's one frame) are allocated this many bytes of
batches at a time by :meth:`RolloutWriter.renew` (one allocation a leaf, not a batch)."""
SLAB_MAX_BATCH_BYTES = 4 << 10
"""A batch whose leaves take more than this is allocated alone."""


def empty_cpu(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty`` on the CPU; large leaves reuse pooled, already-faulted mappings.

    A rollout writes fresh memory, and first-touch page faults dominate its cost for big
    batches (4096 envs: ~4 us per 4 KiB page on the test VM, several times the writes
    themselves). Large leaves get their own anonymous ``mmap`` (advised
    ``MADV_HUGEPAGE``; one per leaf, so pickling a leaf never drags in the others), and
    the mapping is kept in a small pool: once every tensor using it is gone (its only
    reference is the pool's), the next rollout of the same size reuses it, faults and
    all already paid. The pool keeps at most ``POOL_MAX_BYTES`` mapped.
    """
    nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
    if nbytes < POOL_MIN_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return torch.empty(shape, dtype=dtype)
    bucket = _POOL.setdefault(nbytes, [])
    for mm in bucket:
        if sys.getrefcount(mm) <= 3:  # the bucket, the loop variable, getrefcount's argument
            return torch.frombuffer(mm, dtype=dtype).view(shape)
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE)
    if sum(len(b) * n for n, b in _POOL.items()) + nbytes <= POOL_MAX_BYTES:
        bucket.append(mm)
    return torch.frombuffer(mm, dtype=dtype).view(shape)  # the tensor keeps ``mm`` alive


_NUMPY_DTYPES = frozenset({
    torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
})
"""Torch dtypes whose tensors have a numpy view (``Tensor.numpy()``; bfloat16 has none)."""


def _tup(key: Any) -> tuple:
    return (key,) if isinstance(key, str) else tuple(key)


class RolloutWriter:
    """Storage for ``steps`` steps of a template, and the per-step copy pairs into it.

    The storage has the template's keys, dtypes and event shapes, and the batch size
    ``[*B]`` of the template with ``steps`` inserted at ``time_dim``: ``0`` gives
    time-major ``[T, *B]`` (``EnvBase.rollout``), ``len(B)`` time-last ``[*B, T]``
    (``Collector``). The pair builders are called once, before the loop; in the loop
    ``dst[t] = src`` copies a step (or ``dst[...] = src`` over the per-step lists of
    :meth:`at`). An internal of the rollout loops and the collectors, public so that
    rl-collectors reaches it by its public name.

    Args:
        template: a TensorDict of batch size ``[*B]`` (its values are not read).
        steps: ``T``, the number of steps to store.
        time_dim: where time goes among the batch dims, ``0 <= time_dim <= len(B)``.
        device: the storage's device; by default each leaf's own.
        zeros: zero-filled storage (what is never written reads ``0``); by default it is
            uninitialised, and large CPU leaves come from a pool of already-faulted
            mappings reused across rollouts.

    Attributes:
        storage: the allocated TensorDict.
        time_dim: where time is among its batch dims.
        steps: ``T``.
        layout: the storage's :class:`rl_profiling.layout.BatchLayout`, the one
            description of a batch that the packed transports read too.

    Raises:
        ValueError: ``time_dim`` is out of range.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_envs import RolloutWriter
        >>> obs = torch.zeros(2, 3)
        >>> writer = RolloutWriter(TensorDict({"obs": obs}, [2]), 4, time_dim=1)
        >>> writer.storage.batch_size
        torch.Size([2, 4])
        >>> pairs = writer.pairs(TensorDict({"obs": obs}, [2]))  # obs keeps its identity
        >>> for t in range(4):
        ...     obs += 1                                        # the env steps in place
        ...     for dst, src in pairs:
        ...         dst[t] = src
        >>> writer.storage["obs"][0, :, 0]
        tensor([1., 2., 3., 4.])
        >>> writer.layout.batch_size, writer.layout.time_dim, writer.layout.shapes
        ((2, 4), 1, ((3,),))
    """

    def __init__(
        self,
        template: TensorDictBase,
        steps: int,
        *,
        time_dim: int,
        device: torch.device | None = None,
        zeros: bool = False,
    ) -> None:
        if not 0 <= time_dim <= template.batch_dims:
            raise ValueError(
                f"RolloutWriter: expected 0 <= time_dim <= {template.batch_dims} (the "
                f"template's batch dims), received time_dim={time_dim}"
            )
        self.time_dim, self.steps = time_dim, steps
        self._layout: BatchLayout | None = None
        self._zeros = zeros
        self._recipe: list[tuple[tuple, torch.Size, torch.dtype, torch.device]] | None = None
        self._slots: dict[tuple, torch.Tensor] | None = None  # renew()'s leaves, by key
        self._np_slots: dict[tuple, np.ndarray] | None = None  # their time-first numpy views
        self._np_ptrs: dict[tuple, tuple[torch.Tensor, int]] | None = None  # slab, address
        self._np_used: list[tuple[torch.Tensor, int]] = []  # those bind() handed out views of
        self._slab: _Slab | None = None  # renew()'s batches allocated together, if small

        def alloc(x: torch.Tensor) -> torch.Tensor:
            shape = (*x.shape[:time_dim], steps, *x.shape[time_dim:])
            return self._alloc(shape, x.dtype, x.device if device is None else device)

        b = tuple(template.batch_size)
        batch = (*b[:time_dim], steps, *b[time_dim:])
        if device is None:
            self.storage = template.apply(alloc, batch_size=batch)
        else:
            self.storage = template.apply(alloc, batch_size=batch, device=device)
        # TorchRL's mark of the time dim, which the estimators read (any layout, any view)
        self.storage.refine_names(*(TIME if d == time_dim else None for d in range(len(batch))))

    @property
    def layout(self) -> BatchLayout:
        """The storage's layout, the one description of a batch
        (:class:`rl_profiling.layout.BatchLayout`: batch size with time at ``time_dim``,
        keys, dtypes, event shapes), read off the storage once."""
        if self._layout is None:
            self._layout = BatchLayout.of(self.storage, time_dim=self.time_dim)
        return self._layout

    def slot(self, key: Any) -> torch.Tensor:
        """The storage leaf ``key`` with time moved first: ``slot(key)[t]`` is step ``t``."""
        leaf = self._slots.get(_tup(key)) if self._slots is not None else None
        return (self.storage.get(key) if leaf is None else leaf).movedim(self.time_dim, 0)

    def renew(self, *, slab: bool = True) -> RolloutWriter:
        """A writer of a new storage laid out as this one's (keys, dtypes, shapes, devices,
        dim names, zero-filled or not), allocated from the list of leaves read off this
        storage once instead of walking a template: what a collector pays for each batch
        it hands out (the batch is its caller's, the next one is written elsewhere).

        Leaves set on the storage after construction are part of the layout renewed. A
        small CPU layout (at most ``SLAB_MAX_BATCH_BYTES``) is allocated from a slab of
        ``SLAB_BYTES`` holding many batches, each its own ``[i]`` view, unless ``slab`` is
        false (storage about to be moved to shared memory: it would move the slab's).

        Args:
            slab: allow a small layout's slab.

        Returns:
            A new :class:`RolloutWriter` (the same ``time_dim``, ``steps`` and ``layout``).

        Raises:
            TypeError: a leaf of the storage is not a tensor.

        Examples:
            >>> import torch
            >>> from tensordict import TensorDict
            >>> from rl_envs import RolloutWriter
            >>> template = TensorDict({"obs": torch.zeros(2, 3)}, [2])
            >>> writer = RolloutWriter(template, 4, time_dim=1, zeros=True)
            >>> fresh = writer.renew()
            >>> fresh.storage is writer.storage, fresh.storage.names
            (False, [None, 'time'])
            >>> fresh.storage["obs"].shape, bool((fresh.storage["obs"] == 0).all())
            (torch.Size([2, 4, 3]), True)
        """
        if self._recipe is None:
            self._recipe = []
            for key, x in self.storage.items(True, True):
                if not isinstance(x, torch.Tensor):
                    raise TypeError(f"RolloutWriter.renew: expected tensor leaves, got "
                                    f"{type(x).__name__} at {key!r}")
                self._recipe.append((_tup(key), x.shape, x.dtype, x.device))
            self._slab = _Slab.fits(self._recipe, self.time_dim, self._zeros)
        fresh = copy.copy(self)
        old = self.storage
        if self._slab is not None and slab:
            slots, fresh._np_slots, fresh._np_ptrs = self._slab.take()
        else:
            fresh._np_slots = fresh._np_ptrs = None
            slots = {key: self._alloc(shape, dtype, device)
                     for key, shape, dtype, device in self._recipe}
        fresh._np_used = []
        fresh.storage = _assemble(slots, old.batch_size, old.device, old.names)
        fresh._slots = slots
        return fresh

    def _alloc(self, shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """One leaf: zeroed, or uninitialised (large CPU leaves from the mapping pool)."""
        if self._zeros:
            return torch.zeros(shape, dtype=dtype, device=device)
        if device.type == "cpu":
            return empty_cpu(shape, dtype)
        return torch.empty(shape, dtype=dtype, device=device)

    def array(self, key: Any) -> np.ndarray:
        """The CPU storage leaf ``key`` as a time-first numpy array (``array(key)[t]`` is step
        ``t``'s slot), a slab's view registered as :meth:`bind`'s are (so that
        :meth:`views_moved` sees it move)."""
        key = _tup(key)
        if self._np_slots is not None:
            self._np_used.append(self._np_ptrs[key])
            return self._np_slots[key]
        return self.slot(key).numpy()

    def arrays(self) -> dict[tuple, np.ndarray] | None:
        """The storage's leaves as numpy arrays by tuple key, time first, where this writer
        made them already (a slab's batch on the CPU, :meth:`views_moved` false), else
        ``None``: what the collector reads and writes once a batch (done flags, trajectory
        ids, policy version, the finite check) costs no ``Tensor.numpy()`` call, three
        torch ops, a leaf. They are the storage's memory: a write lands in the batch."""
        return self._np_slots

    def views_moved(self) -> bool:
        """Whether the memory of a slab's batch moved since its numpy views were made, in
        which case they are dropped and :meth:`bind` makes fresh ones (the caller binds its
        pairs again). A batch handed out from the same slab and moved to shared memory moves
        the whole slab (``share_memory_()``, which a ``torch.multiprocessing`` queue calls):
        the views made before would point at freed memory."""
        if all(x.data_ptr() == p for x, p in self._np_used):
            return False
        self._np_slots, self._np_ptrs, self._np_used = None, None, []
        return True

    @staticmethod
    def copy_pair(dst: torch.Tensor, src: torch.Tensor) -> tuple[Any, Any]:
        """``(dst, src)`` for ``dst[...] = src``: numpy views when both are on the CPU (a
        numpy slice assignment costs a fraction of ``Tensor.copy_``), else the tensors
        (``src`` detached)."""
        if dst.device.type == "cpu" and src.device.type == "cpu":
            return dst.numpy(), src.detach().numpy()
        return dst, src.detach()

    @staticmethod
    def sources(td: TensorDictBase, keys: list | None = None) -> list[tuple[tuple, Any, Any]]:
        """The leaves of ``td`` a loop copies from, read once for :meth:`bind`:
        ``(key, detached tensor, its numpy view or None off the CPU)``. A collector reads
        its fixed buffers (the env's, the policy input) once per layout and binds them to
        each new batch's storage."""
        keys = list(td.keys(True, True)) if keys is None else keys
        out = []
        for key in keys:
            x = td.get(key).detach()
            out.append((_tup(key), x, x.numpy() if x.device.type == "cpu" else None))
        return out

    def bind(self, sources: list[tuple[tuple, Any, Any]], prefix: tuple = ()) -> list:
        """``(dst, src)`` pairs of :meth:`sources`' leaves into this storage (under
        ``prefix``), as :meth:`copy_pair` makes them: numpy views when both sides are on the
        CPU, else the tensors."""
        pairs = []
        np_slots = self._np_slots
        for key, x, x_np in sources:
            if np_slots is not None and x_np is not None:  # a slab's batch: views made already
                pairs.append((self.array((*prefix, *key)), x_np))
                continue
            dst = self.slot((*prefix, *key))
            cpu = x_np is not None and dst.device.type == "cpu"
            pairs.append((dst.numpy(), x_np) if cpu else (dst, x))
        return pairs

    def pairs(
        self, sources: TensorDictBase, keys: list | None = None, prefix: tuple = ()
    ) -> list[tuple[Any, Any]]:
        """``(dst, src)`` for sources that keep their identity (env buffers): ``dst[t] = src``
        stores step ``t``.

        Args:
            sources: the TensorDict whose leaves are copied (``[*B]``).
            keys: its leaves to copy; by default every leaf.
            prefix: where they go in the storage (``("next",)``).

        Returns:
            Numpy views when both sides are on the CPU, else the tensors.
        """
        return self.bind(self.sources(sources, keys), prefix)

    def keyed(self, keys: list, prefix: tuple = (), arrays: bool = False) -> list[tuple[Any, Any]]:
        """``(dst, key)`` for sources read by key each step (a policy writes new tensors):
        ``dst[t].copy_(td.get(key))`` stores step ``t``. A one-element key is given as its
        string (``get("action")`` is the cheaper call). With ``arrays`` (the caller's
        sources are CPU tensors), a CPU leaf's ``dst`` is its time-first numpy array
        (:meth:`array`), stored as ``dst[t] = td.get(key).detach().numpy()``."""
        out = []
        for k in (_tup(k) for k in keys):
            full = (*prefix, *k)
            dst: Any = self.slot(full)
            if arrays and dst.device.type == "cpu" and dst.dtype in _NUMPY_DTYPES:
                dst = self.array(full)
            out.append((dst, k[0] if len(k) == 1 else k))
        return out


def _assemble(leaves: dict[tuple, torch.Tensor], batch_size: torch.Size, device: Any,
              names: list) -> TensorDict:
    """The TensorDict of ``leaves`` (by tuple key), every level with ``batch_size`` and
    ``names``: built without re-checking what the leaves' recipe checked once (tensordict's
    unchecked constructor, a third of the checked one's cost on a one-frame batch)."""
    tree: dict = {}
    for key, x in leaves.items():
        node = tree
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = x

    def build(node: dict) -> TensorDict:
        source = {k: build(v) if isinstance(v, dict) else v for k, v in node.items()}
        return TensorDict._new_unsafe(source=source, batch_size=batch_size, device=device,
                                      names=list(names), nested=False)

    return build(tree)


class _Slab:
    """Batches of a small layout allocated ``count`` at a time: one zeroed (or empty)
    tensor a leaf holds ``count`` batches, each handed out as its own ``[i]`` view, made
    when taken (disjoint memory: a handed-out batch is still its caller's alone), with
    its time-first numpy views made once for the whole slab. Costs a slab's memory
    (``SLAB_BYTES``) for as long as any of its batches lives."""

    def __init__(self, recipe: list, time_dim: int, zeros: bool, count: int) -> None:
        self.recipe, self.time_dim, self.zeros, self.count = recipe, time_dim, zeros, count
        self.next = count  # the first take() allocates

    @classmethod
    def fits(cls, recipe: list, time_dim: int, zeros: bool) -> _Slab | None:
        """A slab for ``recipe`` if its batches are small CPU ones, else ``None``."""
        if any(device.type != "cpu" for _, _, _, device in recipe):
            return None
        nbytes = sum(shape.numel() * torch.empty((), dtype=dtype).element_size()
                     for _, shape, dtype, _ in recipe)
        if nbytes > SLAB_MAX_BATCH_BYTES:
            return None
        return cls(recipe, time_dim, zeros, max(SLAB_BYTES // max(nbytes, 1), 2))

    def take(self) -> tuple[dict[tuple, torch.Tensor], dict[tuple, np.ndarray], dict]:
        """The next batch's leaves and their time-first numpy views, by key, and each key's
        slab with the address its views were made at (:meth:`RolloutWriter.views_moved`)."""
        if self.next == self.count:
            self._refill()
        i, self.next = self.next, self.next + 1
        # a leaf is made when its batch is taken: a whole slab's made ahead would live long
        # enough to reach the garbage collector's oldest generation and make its full
        # passes (0.2 s each in an off-policy run) several times more frequent
        return ({key: slab.select(0, i) for key, slab in self.leaves.items()},
                {key: views[i] for key, views in self.numpy.items()}, self.ptrs)

    def _refill(self) -> None:
        make = torch.zeros if self.zeros else torch.empty
        self.leaves, self.numpy, self.ptrs, self.next = {}, {}, {}, 0
        for key, shape, dtype, _ in self.recipe:
            slab = make((self.count, *shape), dtype=dtype)
            self.leaves[key] = slab
            self.numpy[key] = slab.movedim(self.time_dim + 1, 1).numpy()
            self.ptrs[key] = (slab, slab.data_ptr())  # the slab itself: offset 0
