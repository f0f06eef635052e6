"""The frame store of :class:`~rl_collectors.AsyncBatchedCollector`.

Frames arrive in two halves at different times: the root half (observation, action,
policy outputs, policy version, env id) when the inference server sends an action, and
the ``"next"`` half when that env's step result comes back. The store keeps two flat
batches of ``frames_per_batch`` frames, preallocated once (``[2 * F]``): while the last
results of batch ``k`` are still in flight, the server may already send actions whose
frames belong to batch ``k + 1``. Writes are ``index_copy_`` over every env served at
once (no TensorDict per step).

At batch end, :meth:`FrameStore.finalize` copies the batch out ordered by env (a stable
sort: each env's frames stay in time order, so its trajectories are contiguous) and
assigns trajectory ids, vectorised, from the done flags.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rl_collectors._keys import COLLECTOR, DONE, NEXT, POLICY_VERSION, TRAJ_IDS
from rl_collectors._layout import alloc_buffer, leaf_keys
from rl_collectors._traj import TrajCounter

__all__ = ["ENV_IDS", "ROOT_FLAGS", "FrameStore", "TrajIds", "completed_trajectories"]

ROOT_FLAGS = [("done",), ("terminated",), ("truncated",)]
"""Root done flags: always ``False`` after the fast path, so never copied (as in ``Collector``)."""

ENV_IDS = (COLLECTOR, "env_ids")
"""int64 ``[F]``: index of the env (worker) that produced each frame."""


class TrajIds(TrajCounter):
    """A :class:`~rl_collectors.TrajCounter` for batches whose frames are grouped by env.

    The state is the counter's (per env the running trajectory's id and whether the last
    frame seen was done; one counter for new ids, unique across batches); only the layout
    of the frames differs: flat, each env's frames in time order. One row per env:
    ``TrajIds(num_envs)``.
    """

    def assign_grouped(self, env_ids: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Ids for frames sorted by env (stable), ``done`` the ``("next", "done")`` flags."""
        n = env_ids.numel()
        first = torch.ones(n, dtype=torch.bool)
        first[1:] = env_ids[1:] != env_ids[:-1]
        prev_done = torch.zeros(n, dtype=torch.bool)
        prev_done[1:] = done[:-1]
        starts = torch.where(first, self.pending[env_ids], prev_done)
        c = starts.cumsum(0)
        seg_head = torch.cummax(
            torch.where(first, torch.arange(n), torch.zeros(n, dtype=torch.int64)), 0
        ).values
        before = (c - starts.long())[seg_head]
        ids = torch.where(c - before == 0, self.current[env_ids], self.next_local + c - 1)
        self.next_local += int(c[-1]) if n else 0
        last = torch.ones(n, dtype=torch.bool)
        last[:-1] = env_ids[:-1] != env_ids[1:]
        self.current[env_ids[last]] = ids[last]
        self.pending[env_ids[last]] = done[last]
        return ids


class FrameStore:
    """Two preallocated flat batches of ``frames_per_batch`` frames.

    Args:
        root: a ``[]``-batched template of one frame's root (env leaves and policy outputs).
        nxt: a ``[]``-batched template of one frame's ``"next"`` leaves.
        frames_per_batch: frames per batch ``F``.
        num_envs: number of envs (for the trajectory ids).
    """

    def __init__(
        self, root: TensorDictBase, nxt: TensorDictBase, frames_per_batch: int, num_envs: int
    ) -> None:
        self.frames_per_batch = frames_per_batch
        self.buffer = alloc_buffer(root, nxt, 2 * frames_per_batch, torch.device("cpu")).storage
        self.buffer.set(ENV_IDS, torch.zeros(2 * frames_per_batch, dtype=torch.int64))
        self.root_keys = [
            k for k in leaf_keys(root) if k not in ROOT_FLAGS
        ]  # stay False, as allocated
        self.root_dst = [self.buffer.get(k) for k in self.root_keys]
        self.next_keys = leaf_keys(nxt)
        self.next_dst = [self.buffer.get((NEXT, *k)) for k in self.next_keys]
        self.version = self.buffer.get(POLICY_VERSION)
        self.env_ids = self.buffer.get(ENV_IDS)
        self.traj = TrajIds(num_envs)

    def write_root(
        self, pos: torch.Tensor, envs: torch.Tensor, policy_input: TensorDictBase, version: int
    ) -> None:
        """Frames at ``pos``: the policy input/outputs ``policy_input``.

        ``policy_input``'s rows are in the order of ``envs``.
        """
        for key, dst in zip(self.root_keys, self.root_dst, strict=True):
            dst.index_copy_(0, pos, policy_input.get(key).to(dst.device))
        self.version.index_fill_(0, pos, version)
        self.env_ids.index_copy_(0, pos, envs)

    def write_next(
        self, pos: torch.Tensor, envs: torch.Tensor, next_flat: list[torch.Tensor]
    ) -> None:
        """Frames at ``pos``: the envs' step results (``next_flat`` leaves, ``[num_envs, ...]``)."""
        for dst, src in zip(self.next_dst, next_flat, strict=True):
            dst.index_copy_(0, pos, src.index_select(0, envs))

    def finalize(self, slot: int, frames: int) -> TensorDictBase:
        """Copy batch ``slot`` (its first ``frames`` frames) out, grouped by env, with traj ids."""
        start = slot * self.frames_per_batch
        view = self.buffer[start : start + frames]
        order = torch.sort(view.get(ENV_IDS), stable=True).indices
        batch = view[order]
        done = batch.get((NEXT, DONE)).reshape(frames)
        batch.set(TRAJ_IDS, self.traj.assign_grouped(batch.get(ENV_IDS), done))
        return batch


def completed_trajectories(
    batch: TensorDictBase, tails: dict[int, TensorDictBase]
) -> list[TensorDictBase]:
    """The trajectories of ``batch`` that end in it (joined to their ``tails`` from earlier
    batches); the unfinished ones are kept in ``tails`` by trajectory id."""
    ids = batch.get(TRAJ_IDS)
    done = batch.get((NEXT, DONE)).reshape(-1)
    change = torch.ones_like(ids, dtype=torch.bool)
    change[1:] = ids[1:] != ids[:-1]
    starts = torch.nonzero(change).squeeze(-1).tolist() + [ids.numel()]
    out = []
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        tid = int(ids[a])
        part = batch[a:b]
        if tid in tails:
            part = torch.cat([tails.pop(tid), part], 0)
        if bool(done[b - 1]):
            out.append(part)
        else:
            tails[tid] = part
    return out
