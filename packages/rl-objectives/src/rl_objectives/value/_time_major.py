"""Time-major scratch buffers for the in-place scan, and the copies in and out of them.

A rollout leaf is laid out ``[*B, T, *F]``: time is contiguous, rows are ``T`` apart.
The in-place scan (:func:`rl_objectives.value._scan.scan_time_major_`) steps through
time and wants every step to be one contiguous row of ``R = prod(B) * prod(F)`` values,
i.e. the ``[T, R]`` layout. The copies between the two layouts go through a 2-d
``[R, T] -> [T, R]`` transposed ``copy_`` whenever the leaf allows a 2-d view, which is
ATen's cache-blocked transpose (several times faster than a strided 3-d copy); other
layouts fall back to a plain strided copy.

Scratch memory: on the CPU the scan's buffers (and the estimators' bool masks) come from
:func:`scratch`, one reusable buffer per thread, slot, dtype and device, as large as the
largest batch seen. In training every call brings a new batch; fresh memory for the
temporaries would cost a page fault per 4 KiB page on each call, and on a busy machine
that costs more than the arithmetic. Nothing returned to a caller lives in scratch memory.
"""

from __future__ import annotations

import math
import threading

import torch

__all__ = [
    "chunk_shape",
    "from_time_major",
    "mask_to_time_major",
    "scale_time_major_",
    "scan_buffer",
    "scratch",
    "to_time_major",
]

_SCRATCH = threading.local()


def scratch(slot: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
            ) -> torch.Tensor:
    """A contiguous tensor of ``shape`` whose content is undefined, reused across calls.

    On the CPU it is a view of this thread's buffer for ``(slot, dtype)``, grown to the
    largest size asked for; two tensors in use at once need two slots. Elsewhere (CUDA's
    caching allocator already reuses memory) it is a fresh ``torch.empty``.
    """
    if torch.device(device).type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None:
        buffers = _SCRATCH.buffers = {}
    numel = math.prod(shape)
    buf = buffers.get((slot, dtype))
    if buf is None or buf.numel() < numel:
        buf = buffers[(slot, dtype)] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)


def chunk_shape(steps: int) -> tuple[int, int]:
    """``(chunk, n_chunks)`` for ``steps``, about ``sqrt(T)`` each: the scan makes
    ``chunk + n_chunks`` sequential operations. A divisor of ``T`` between
    ``sqrt(T) / 2`` and ``sqrt(T)`` is preferred (no padding, e.g. ``1000 = 25 * 40``);
    otherwise ``n_chunks * chunk > T`` and the buffers carry zero padding."""
    root = math.isqrt(steps)
    for chunk in range(root, max(root // 2, 2) - 1, -1):
        if steps % chunk == 0:
            return chunk, steps // chunk
    chunk = root + 1
    return chunk, -(-steps // chunk)


def scan_buffer(like: torch.Tensor, time_dim: int, spare: torch.Tensor | None = None,
                slot: str = "b") -> torch.Tensor:
    """A ``[n_chunks * chunk, R]`` buffer for the scan, its padded tail rows zeroed.

    Padded steps have ``a = b = 0``: ``x = 0`` after the last real step, no effect.
    Without padding, a contiguous ``spare`` tensor of ``T * R`` elements whose content is
    no longer needed is reused as the buffer; otherwise the buffer is the scratch memory
    of ``slot`` (see :func:`scratch`): fresh memory costs page faults, which on a loaded
    machine take longer than the arithmetic.
    """
    steps = like.shape[time_dim]
    chunk, n_chunks = chunk_shape(steps)
    rows = like.numel() // steps
    if n_chunks * chunk == steps and spare is not None and spare.is_contiguous():
        return spare.view(steps, rows)
    buffer = scratch(slot, (n_chunks * chunk, rows), like.dtype, like.device)
    buffer[steps:].zero_()
    return buffer


def _rows(x: torch.Tensor, time_dim: int) -> torch.Tensor | None:
    """``x`` as an ``[R, T]`` view with time last, or ``None`` when no such view exists."""
    moved = x.movedim(time_dim, -1)
    try:
        return moved.view(-1, moved.shape[-1])
    except RuntimeError:
        return None


def to_time_major(x: torch.Tensor, time_dim: int, out: torch.Tensor) -> torch.Tensor:
    """Copy ``x`` (time at ``time_dim``) into ``out``, a contiguous ``[T, R]`` tensor."""
    rows = _rows(x, time_dim)
    if rows is not None:
        return out.copy_(rows.t())
    moved = x.movedim(time_dim, 0)
    out.view(moved.shape).copy_(moved)
    return out


def mask_to_time_major(
    mask: torch.Tensor, scale: float | torch.Tensor, time_dim: int, out: torch.Tensor
) -> torch.Tensor:
    """Write ``mask * scale`` into ``out`` (``[T, R]``) in one pass, reading the bool mask
    as uint8: ``bool -> float`` is not vectorised in ATen, ``uint8 -> float`` is, and a
    0-d float ``scale`` makes ``uint8 * scale`` come out in ``out``'s dtype."""
    if not isinstance(scale, torch.Tensor):
        scale = torch.tensor(scale, dtype=out.dtype, device=out.device)
    if scale.numel() != 1:
        mask_to_time_major(mask, 1.0, time_dim, out)
        return scale_time_major_(out, scale, mask, time_dim)
    src = mask.view(torch.uint8)
    rows = _rows(src, time_dim)
    if rows is not None:  # the cache-blocked transposing copy, then one contiguous pass
        return out.copy_(rows.t()).mul_(scale.reshape(()))
    moved = src.movedim(time_dim, 0)
    torch.mul(moved, scale.reshape(()), out=out.view(moved.shape))
    return out


def from_time_major(
    x: torch.Tensor, like: torch.Tensor, time_dim: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``x`` (``[T, R]``) copied into ``out`` or a new contiguous tensor shaped like
    ``like`` (time at ``time_dim``)."""
    if out is None:
        out = torch.empty(like.shape, dtype=x.dtype, device=x.device)
    rows = _rows(out, time_dim)
    if rows is not None:
        rows.copy_(x.t())
        return out
    moved = out.movedim(time_dim, 0)
    moved.copy_(x.view(moved.shape))
    return out


def scale_time_major_(
    x: torch.Tensor, coef: float | torch.Tensor, like: torch.Tensor, time_dim: int
) -> torch.Tensor:
    """Multiply the ``[T, R]`` tensor ``x`` in place by ``coef``, a float or a tensor
    broadcastable to ``like`` (laid out with time at ``time_dim``)."""
    if not isinstance(coef, torch.Tensor) or coef.numel() == 1:
        return x.mul_(coef)
    moved = coef.expand_as(like).movedim(time_dim, 0)
    x.view(moved.shape).mul_(moved)
    return x
