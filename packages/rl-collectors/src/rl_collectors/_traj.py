"""Trajectory ids, assigned once per batch from the done flags, and ``split_trajectories``.

Ids are computed vectorised at the end of a batch (no per-step work): a trajectory
starts at ``t = 0`` of a batch when the env was reset or the previous batch ended on a
done step, and after every done step. In a worker ``w`` of ``W``, the ``k``-th trajectory
gets id ``k * W + w``, so ids are unique across workers without any communication.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_collectors._keys import DONE, MASK, NEXT, TRAJ_IDS

__all__ = ["TrajCounter", "split_trajectories"]


class TrajCounter:
    """Hands out trajectory ids for the rows (sub-envs) of one collector.

    Args:
        num_rows: number of sub-envs (``env.batch_size.numel()``).
        stride: ids are ``k * stride + offset`` (``stride`` = number of workers).
        offset: this worker's index.

    Examples:
        >>> counter = TrajCounter(num_rows=2)
        >>> done = torch.tensor([[False, True, False], [False, False, False]])
        >>> counter.assign(done, new_start=True)
        tensor([[0, 0, 1],
                [2, 2, 2]])
        >>> counter.assign(torch.zeros(2, 1, dtype=torch.bool))  # trajectories go on
        tensor([[1],
                [2]])
    """

    def __init__(self, num_rows: int, *, stride: int = 1, offset: int = 0) -> None:
        if num_rows < 1 or stride < 1 or not 0 <= offset < stride:
            raise ValueError(
                f"TrajCounter: expected num_rows >= 1, stride >= 1 and 0 <= offset < stride, "
                f"got num_rows={num_rows}, stride={stride}, offset={offset}"
            )
        self.num_rows, self.stride, self.offset = num_rows, stride, offset
        self.next_local = 0
        self.current = torch.zeros(num_rows, dtype=torch.int64)
        self.pending = torch.ones(num_rows, dtype=torch.bool)  # first step starts a trajectory
        self._np_state: tuple | None = None  # (current, pending, their numpy views)

    def assign(self, done: torch.Tensor | np.ndarray, *, new_start: bool = False,
               out: np.ndarray | None = None, time_first: bool = False) -> torch.Tensor | None:
        """Return the ``[num_rows, T]`` local-to-global ids for one batch of done flags.

        Args:
            done: bool ``[num_rows, T]``: the ``("next", "done")`` flags of the batch (a
                tensor, or a numpy array: a CPU batch's, read without a torch op).
            new_start: every row starts a new trajectory at ``t = 0`` (the env was reset).
            out: a numpy int64 array of ``num_rows * T`` elements (a CPU batch's
                ``("collector", "traj_ids")`` leaf, its own shape) to write the ids into
                instead of returning them (CPU ``done`` only).
            time_first: ``out`` is laid out ``[T, ...]`` (a batch's time-first numpy
                view, ``RolloutWriter.arrays``) instead of ``[..., T]``.

        Returns:
            int64 ``[num_rows, T]`` ids, or ``None`` when written into ``out``.
        """
        if isinstance(done, torch.Tensor):
            if done.device.type != "cpu":
                local = self._assign_torch(done, new_start)
                return local * self.stride + self.offset if self.stride > 1 else local
            done = done.numpy()
        # numpy: a few microseconds, not torch's per-op cost (a one-frame batch's ids)
        local = self._assign_np(done, new_start)
        if self.stride > 1:
            local = local * self.stride + self.offset
        if out is None:
            return torch.from_numpy(local)
        out[...] = (local.T if time_first else local).reshape(out.shape)
        return None

    def _state_np(self) -> tuple[np.ndarray, np.ndarray]:
        """``current`` and ``pending`` as numpy views (updated in place), made again only
        when the tensors were replaced (``load_state_dict``, a device batch)."""
        cached = self._np_state
        if cached is None or cached[0] is not self.current or cached[1] is not self.pending:
            cached = self._np_state = (self.current, self.pending, self.current.numpy(),
                                       self.pending.numpy())
        return cached[2], cached[3]

    def _assign_np(self, done: np.ndarray, new_start: bool) -> np.ndarray:
        current, pending = self._state_np()
        if done.shape[1] == 1:  # one step (an off-policy loop's batch): no cumsum over time
            starts = pending | new_start
            per_row = starts.astype(np.int64)
            local = np.where(starts, self.next_local + per_row.cumsum() - 1, current)[:, None]
            self.next_local += int(per_row.sum())
            current[:] = local[:, 0]
            pending[:] = done[:, 0]
            return local
        starts = np.empty(done.shape, dtype=np.int64)
        starts[:, 0] = pending | new_start
        starts[:, 1:] = done[:, :-1]
        k = starts.cumsum(1)
        per_row = k[:, -1]
        base = self.next_local + per_row.cumsum() - per_row
        local = np.where(k == 0, current[:, None], base[:, None] + k - 1)
        self.next_local += int(per_row.sum())
        current[:] = local[:, -1]
        pending[:] = done[:, -1]
        return local

    def _assign_torch(self, done: torch.Tensor, new_start: bool) -> torch.Tensor:
        starts = torch.empty_like(done)
        starts[:, 0] = self.pending.to(done.device) | new_start
        starts[:, 1:] = done[:, :-1]
        per_row = starts.sum(1)
        base = self.next_local + per_row.cumsum(0) - per_row
        k = starts.cumsum(1)
        local = torch.where(k == 0, self.current.to(done.device)[:, None], base[:, None] + k - 1)
        self.next_local += int(per_row.sum())
        self.current = local[:, -1].cpu()
        self.pending = done[:, -1].cpu()
        return local

    def state_dict(self) -> dict:
        return {
            "next_local": self.next_local,
            "current": self.current.clone(),
            "pending": self.pending.clone(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.next_local = int(state["next_local"])
        self.current = state["current"].clone()
        self.pending = state["pending"].clone()


def _row_ids(td: TensorDictBase) -> torch.Tensor:
    """Trajectory ids ``[rows, T]`` of a batch: stored ones, or rebuilt from done flags."""
    rows = td.batch_size.numel() // td.batch_size[-1]
    if TRAJ_IDS in td.keys(True, True):
        return td.get(TRAJ_IDS).reshape(rows, -1)
    done = td.get((NEXT, DONE)).reshape(rows, td.batch_size[-1])
    return TrajCounter(rows).assign(done, new_start=True)


def split_trajectories(
    td: TensorDictBase, *, as_nested: bool | torch.layout = False
) -> TensorDictBase:
    """Split a ``[*B, T]`` batch into a zero-padded ``[num_trajs, max_len]`` one.

    Trajectories are the runs of equal ``("collector", "traj_ids")`` (or, without ids,
    the segments between ``("next", "done")`` flags) along the time dim of each row.
    They come out in order of appearance (row by row); ``("collector", "mask")`` is
    ``True`` on real steps and ``False`` on padding.

    Args:
        td: a collected batch, time on the last batch dim.
        as_nested: TorchRL's option: no padding, each leaf a nested tensor of the
            trajectories (``out[i]`` is trajectory ``i``, its own length), batch size
            ``[num_trajs]`` (TorchRL's reads ``[num_trajs, -1]``), no mask. ``True``
            builds ``torch.jagged`` nested tensors (torch's public constructor; TorchRL
            builds strided ones through a private torch function), a ``torch.layout``
            picks the layout. As in TorchRL, a batch whose rows are single whole-row
            trajectories comes back padded (nothing to pad) with its mask.

    Returns:
        A new TensorDict of batch size ``[num_trajs, max_len]`` (``[num_trajs]``
        nested).

    Raises:
        ValueError: ``td`` has no batch dim, or ``as_nested`` is neither a bool nor a
            ``torch.layout``.

    Examples:
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"x": torch.arange(4.).reshape(1, 4),
        ...                  "next": {"done": torch.tensor([[True, False, False, True]])}},
        ...                 batch_size=[1, 4])
        >>> out = split_trajectories(td)
        >>> out["x"]
        tensor([[0., 0., 0.],
                [1., 2., 3.]])
        >>> out["collector", "mask"]
        tensor([[ True, False, False],
                [ True,  True,  True]])
    """
    if td.batch_dims < 1:
        raise ValueError(
            f"split_trajectories: expected a batch with a time dim, got batch_size={td.batch_size}"
        )
    if not isinstance(as_nested, (bool, torch.layout)):
        raise ValueError(
            f"as_nested: expected a bool or a torch.layout, received {as_nested!r}"
        )
    ids = _row_ids(td)
    # a run ends where the id changes along time, or at the end of a row
    flat = td.reshape(-1)
    change = torch.ones_like(ids, dtype=torch.bool)
    change[:, 1:] = ids[:, 1:] != ids[:, :-1]
    start = change.reshape(-1)
    seg = start.cumsum(0) - 1
    num = int(seg[-1]) + 1
    first = torch.nonzero(start).squeeze(-1)
    pos = torch.arange(start.numel()) - first[seg]
    lengths = torch.bincount(seg, minlength=num)
    max_len = int(lengths.max())
    whole_rows = max_len == td.batch_size[-1] and num * max_len == flat.numel()
    if as_nested is not False and not whole_rows:  # TorchRL pads whole rows even then
        return _nested(flat, lengths, torch.jagged if as_nested is True else as_nested)
    out = flat.apply(
        lambda x: x.new_zeros((num, max_len, *x.shape[1:])), batch_size=[num, max_len]
    )
    out[seg, pos] = flat
    mask = torch.arange(max_len)[None, :] < lengths[:, None]
    out.set(MASK, mask)
    return out




def _nested(flat: TensorDictBase, lengths: torch.Tensor, layout: torch.layout) -> TensorDictBase:
    """``flat``'s consecutive runs of ``lengths`` rows as nested tensors, ``[num, -1]``."""
    if layout == torch.jagged:
        offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
        torch.cumsum(lengths, 0, out=offsets[1:])

        def nest(x: torch.Tensor) -> torch.Tensor:
            return torch.nested.nested_tensor_from_jagged(x, offsets)
    else:
        sizes = lengths.tolist()

        def nest(x: torch.Tensor) -> torch.Tensor:
            return torch.nested.as_nested_tensor(list(x.split(sizes)), layout=layout)

    # the ragged time dim stays out of the batch size: tensordict's public constructors
    # refuse a -1 there (TorchRL gets [num, -1] through a private, unchecked call)
    return flat.apply(nest, batch_size=[len(lengths)])
