"""``SerialEnv`` and ``ParallelEnv``: one batched env over ``num_workers`` copies of a sub-env.

Both share :class:`_BatchedEnv` (arguments, stacked specs, batched buffers, seeding,
partial resets); they differ only in where the sub-envs run: in this process for
``SerialEnv``, one spawned process each for ``ParallelEnv`` (see
:mod:`rl_envs._batched_worker` and ``docs/internals/parallel-env.md``).
"""

from __future__ import annotations

import multiprocessing
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from rl_profiling import profiled
from tensordict import TensorDictBase

from rl_envs._batched_args import check_args, check_picklable, check_same_specs
from rl_envs._batched_worker import (
    SPEC_NAMES,
    STEP_MSG,
    WorkerPool,
    env_meta,
    env_state,
    load_env_state,
)
from rl_envs._buffers import zero_buffers
from rl_envs._env import EnvBase

__all__ = ["ParallelEnv", "SerialEnv"]

DEFAULT_TIMEOUT_S = 120.0
"""Default deadline of every wait on a ``ParallelEnv`` worker (start-up included)."""


class _BatchedEnv(EnvBase):
    """What ``SerialEnv`` and ``ParallelEnv`` share. Not for direct use."""

    def _init_batched(self, num_workers: int, metas: list[dict[str, Any]], device: Any) -> None:
        """Call ``EnvBase.__init__`` and stack the specs of the sub-envs (``metas``)."""
        check_same_specs(metas)
        meta = metas[0]
        self.num_workers = num_workers
        self._sub_batch_size = meta["batch_size"]
        self._sub_numel = max(1, self._sub_batch_size.numel())
        batch = torch.Size((num_workers, *self._sub_batch_size))
        EnvBase.__init__(self, batch_size=batch, device=device)
        for name in SPEC_NAMES:
            setattr(self, name, meta[name].expand(batch))
        self._own_root, self._own_next = self._alloc_buffers()
        self.bind_buffers(self._own_root, self._own_next)

    def _alloc_buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        """The batched ``(root, next)`` buffers, from the stacked specs (as ``EnvBase`` does)."""
        return zero_buffers(self)

    def buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        if self._root_buf is None or self._next_buf is None:  # e.g. after an action_spec assignment
            self.bind_buffers(self._own_root, self._own_next)
        return self._root_buf, self._next_buf  # type: ignore[return-value]

    def _reset_rows(self, reset_mask: torch.Tensor | None) -> tuple[list[int], list[bool]]:
        """Workers to reset, and for each whether only part of its sub-batch is reset."""
        if reset_mask is None:
            return list(range(self.num_workers)), [False] * self.num_workers
        rows = reset_mask.reshape(self.num_workers, -1)
        some, every = rows.any(1).tolist(), rows.all(1).tolist()
        idx = [i for i in range(self.num_workers) if some[i]]
        return idx, [not every[i] for i in idx]

    def _worker_seeds(self, seed: int | None) -> list[int | None]:
        """Worker ``i`` gets ``seed + i * n``.

        ``n`` is the number of envs per worker, so no two sub-envs share a seed.
        """
        return [
            None if seed is None else seed + i * self._sub_numel for i in range(self.num_workers)
        ]

    def state_dict(self) -> dict[str, Any]:
        """Each sub-env's state, in worker order: what ``TransformedEnv`` sub-envs keep
        (``VecNorm`` / ``ObservationNorm`` statistics, ...), ``{}`` for one with none;
        not the simulators' own state (a restored env is reset)."""
        return {"workers": self._worker_states()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into the sub-envs (the same number of them).

        Raises:
            ValueError: ``state`` holds another number of workers.
        """
        workers = state.get("workers") if isinstance(state, dict) else None
        if not isinstance(workers, list) or len(workers) != self.num_workers:
            got = "no worker list" if not isinstance(workers, list) else f"{len(workers)} workers"
            raise ValueError(
                f"state: expected the state of {self.num_workers} workers "
                f"({type(self).__name__}.state_dict()), got {got}"
            )
        self._load_worker_states(workers)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, "
            f"batch_size={tuple(self.batch_size)}, device={self.device})"
        )


class SerialEnv(_BatchedEnv):
    """``num_workers`` sub-envs stepped one after the other in this process.

    The batch size is ``[num_workers, *sub_env.batch_size]`` and the specs are the
    sub-env's, expanded. Each sub-env writes its step straight into its row of the
    batched buffers (``sub_env.bind_buffers(root[i], next[i])``): no copy, no
    TensorDict per step. Same results as :class:`ParallelEnv` for the same seeds.

    Args:
        num_workers: number of sub-envs.
        create_env_fn: callable returning an ``EnvBase``, or a list of ``num_workers``
            of them (one per sub-env: different envs, as in TorchRL); all sub-envs must
            have the same specs.
        create_env_kwargs: keyword arguments of ``create_env_fn``: one dict for all
            sub-envs, or a list of ``num_workers`` dicts.

    Raises:
        ValueError: ``num_workers`` is not a positive int, a list of constructors or of
            kwargs has the wrong length, or the sub-envs' specs differ.
        TypeError: ``create_env_fn`` is not callable.

    Examples:
        >>> import functools
        >>> from rl_envs import GymEnv
        >>> env = SerialEnv(3, functools.partial(GymEnv, "CartPole-v1", num_envs=2))
        >>> env.batch_size
        torch.Size([3, 2])
        >>> env.rollout(4, break_when_any_done=False)["next", "reward"].shape
        torch.Size([3, 2, 4, 1])
        >>> env.close()
    """

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        **torchrl_only: Any,
    ):
        fns, kwargs = check_args(num_workers, create_env_fn, create_env_kwargs, torchrl_only)
        self._envs: list[EnvBase] = []
        try:
            for fn, kw in zip(fns, kwargs, strict=True):
                self._envs.append(fn(**kw))
            metas = [env_meta(env) for env in self._envs]
            self._init_batched(num_workers, metas, metas[0]["device"])
        except BaseException:
            for env in self._envs:
                env.close()
            raise

    def _on_buffers_bound(self) -> None:
        root, nxt = self._root_buf, self._next_buf
        for i, env in enumerate(self._envs):
            env.bind_buffers(root[i], nxt[i])

    @profiled("SerialEnv._step")
    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        self._check_open()
        self.validate_action(action)
        for i, env in enumerate(self._envs):
            env.fast_step(action[i])
        return self._next_buf, self._root_buf  # type: ignore[return-value]

    @profiled("SerialEnv._reset")
    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        self._check_open()
        for i, partial in zip(*self._reset_rows(reset_mask), strict=True):
            self._envs[i].fast_reset(reset_mask[i].clone() if partial else None)
        return self._root_buf  # type: ignore[return-value]

    def _worker_states(self) -> list[dict[str, Any]]:
        return [env_state(env) for env in self._envs]

    def _load_worker_states(self, states: list[dict[str, Any]]) -> None:
        for env, state in zip(self._envs, states, strict=True):
            load_env_state(env, state)

    def _set_seed(self, seed: int | None) -> None:
        for env, s in zip(self._envs, self._worker_seeds(seed), strict=True):
            env.set_seed(s)

    def _close(self) -> None:
        for env in self._envs:
            env.close()


class ParallelEnv(_BatchedEnv):
    """``num_workers`` sub-envs, each in its own process.

    Workers start with the method set by ``multiprocessing.set_start_method`` when the
    program set one, else ``"spawn"``: TorchRL's rule, so a script that sets ``"fork"``
    to build a ``ParallelEnv`` at its top level without a ``__main__`` guard (TorchRL's
    ``torchrl_demo.py``) runs here too.

    Same batch size, specs and results as :class:`SerialEnv`. The batched ``root``,
    ``next``, action and reset-mask buffers are shared-memory tensors allocated here; each
    worker binds its env to its row, so a step is: write the action into the shared
    buffer, send ``"step"`` to every worker, wait for every ``"ok"``. Only these small
    control messages cross the pipes.

    Failures never hang: every wait has a deadline (``timeout``) and watches the worker
    processes; a worker whose env raises, or that dies, raises :class:`WorkerError`
    naming the worker (with its traceback when it raised), and the env shuts down.
    ``close()`` is idempotent and bounded (join, then terminate, then kill); a
    ``ParallelEnv`` that is garbage-collected or alive at interpreter exit is closed too.

    Args:
        num_workers: number of worker processes.
        create_env_fn: callable returning an ``EnvBase``, or a list of ``num_workers``
            of them (one per worker; all sub-envs must have the same specs). Sent to
            the workers by reference when importable, by value (cloudpickle) when defined
            in ``__main__`` (a notebook cell, ``python -c``), a lambda or a closure.
        create_env_kwargs: keyword arguments of ``create_env_fn``: one dict for all
            workers, or a list of ``num_workers`` dicts.
        serial_for_single: TorchRL's: with ``num_workers == 1``, build a
            :class:`SerialEnv` in this process instead (the instance returned is one).
        device: TorchRL's; ``None`` or ``"cpu"`` (the sub-envs run on the CPU here).
        timeout: seconds any wait on a worker may last (start-up included) before the
            worker is declared hung.
        num_sub_threads: ``torch.set_num_threads`` in each worker.

    Raises:
        ValueError: a list of constructors or of kwargs has the wrong length.
        pickle.PicklingError: ``create_env_fn`` (or its kwargs) cannot be pickled at
            all, even by value (the message names which and why); no process started.
        WorkerError: ``create_env_fn`` raised, or could not be loaded, in a worker (the
            message starts with the worker's exception, its traceback follows) or a
            worker died while starting.

    Examples:
        Starting workers takes seconds, so the doctest run skips the first block (the
        same code runs in ``packages/rl-envs/tests/test_envs_batched.py``):

        >>> import functools
        >>> from rl_envs import GymEnv
        >>> make = functools.partial(GymEnv, "CartPole-v1", num_envs=4)
        >>> with ParallelEnv(2, make) as env:  # doctest: +SKIP
        ...     _ = env.set_seed(0)
        ...     data = env.rollout(100, break_when_any_done=False)
        >>> data.batch_size  # doctest: +SKIP
        torch.Size([2, 4, 100])

        Lambdas and what a notebook defines are sent by value; what cannot be pickled at
        all is named before any process starts:

        >>> import threading
        >>> ParallelEnv(2, make, {"lock": threading.Lock()})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        _pickle.PicklingError: create_env_kwargs: cannot be sent to a worker process; ...
    """

    def __new__(cls, num_workers: int = 2, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("serial_for_single") and num_workers == 1:  # TorchRL's rule
            for name in ("timeout", "num_sub_threads"):
                kwargs.pop(name, None)
            return SerialEnv(num_workers, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        num_workers: int,
        create_env_fn: Callable[..., EnvBase],
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        *,
        serial_for_single: bool = False,
        device: Any = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        num_sub_threads: int = 1,
        **torchrl_only: Any,
    ):
        # serial_for_single acted in __new__; check_args checks device
        fns, kwargs = check_args(num_workers, create_env_fn, create_env_kwargs,
                                 {**torchrl_only, "device": device})
        if not timeout > 0:
            raise ValueError(
                f"timeout: expected a positive number of seconds, received {timeout!r}"
            )
        if (
            isinstance(num_sub_threads, bool)
            or not isinstance(num_sub_threads, int)
            or num_sub_threads < 1
        ):
            raise ValueError(
                f"num_sub_threads: expected a positive int, received {num_sub_threads!r}"
            )
        check_picklable(fns, kwargs)
        self._pool = WorkerPool(type(self).__name__, float(timeout))
        self._finalizer = weakref.finalize(self, self._pool.shutdown)
        try:
            _start_workers(self._pool, fns, kwargs, num_sub_threads)
            metas = self._pool.gather(list(range(num_workers)), "create_env_fn")
            if metas[0]["device"].type != "cpu":
                raise ValueError(
                    "create_env_fn: ParallelEnv needs CPU sub-envs, "
                    f"received device {metas[0]['device']}"
                )
            self._init_batched(num_workers, metas, "cpu")
            self._share_and_bind()
        except BaseException:
            self._finalizer()
            raise

    def _share_and_bind(self) -> None:
        """Move the buffers to shared memory and hand every worker its row."""
        self._action_buf = self.full_action_spec.zero()
        self._reset_buf = torch.zeros(self.batch_size, dtype=torch.bool)
        shared = (self._own_root, self._own_next, self._action_buf)
        for td in shared:
            for leaf in td.values(True, True):
                leaf.share_memory_()  # in place: the leaves keep their identity
        self._reset_buf.share_memory_()
        self._action_leaves = [self._action_buf.get(k) for k in self.action_keys]
        self._all_workers = list(range(self.num_workers))
        buffers = (*shared, self._reset_buf)
        self._pool.call(self._all_workers, "bind", [buffers] * self.num_workers)

    def _on_buffers_bound(self) -> None:
        # bound to buffers other than the shared ones: copy into them after each call
        self._mirror = self._root_buf is not self._own_root or self._next_buf is not self._own_next

    def _sync_out(self) -> None:
        if self._mirror:
            self._root_buf.update_(self._own_root)  # type: ignore[union-attr]
            self._next_buf.update_(self._own_next)  # type: ignore[union-attr]

    def _run(self, indices: list[int], cmd: str, args: list[Any] | None = None) -> list[Any]:
        """Run a command on some workers; their answers. On any failure, or an interrupt
        while answers are in flight (they would be read as the answers to the next
        command), close the env."""
        try:
            if cmd == "step":
                self._pool.send(indices, STEP_MSG, cmd)
                return self._pool.gather(indices, cmd)
            return self._pool.call(indices, cmd, args)
        except BaseException:
            self.close()
            raise

    @profiled("ParallelEnv._step")
    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        self._check_open()
        self.validate_action(action)
        if isinstance(action, torch.Tensor):
            self._action_leaves[0].copy_(action)
        else:
            for key, leaf in zip(self.action_keys, self._action_leaves, strict=True):
                leaf.copy_(action.get(key))
        self._run(self._all_workers, "step")
        self._sync_out()
        return self._next_buf, self._root_buf  # type: ignore[return-value]

    @profiled("ParallelEnv._reset")
    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        self._check_open()
        indices, partial = self._reset_rows(reset_mask)
        if reset_mask is not None:
            self._reset_buf.copy_(reset_mask.reshape(self.batch_size))
        if indices:
            self._run(indices, "reset", partial)
        self._sync_out()
        return self._root_buf  # type: ignore[return-value]

    @profiled("ParallelEnv.step_and_maybe_reset")
    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        return super().step_and_maybe_reset(tensordict)

    def _set_seed(self, seed: int | None) -> None:
        self._check_open()
        self._run(self._all_workers, "seed", self._worker_seeds(seed))

    def _worker_states(self) -> list[dict[str, Any]]:
        self._check_open()
        return self._run(self._all_workers, "state_dict")

    def _load_worker_states(self, states: list[dict[str, Any]]) -> None:
        self._check_open()
        self._run(self._all_workers, "load_state_dict", states)

    def _close(self) -> None:
        self._finalizer()

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (empty once closed)."""
        return self._pool.pids


def _start_workers(pool: WorkerPool, fns: list, kwargs: list[dict], num_sub_threads: int) -> None:
    """Start ``pool``'s workers with the program's start method, else ``"spawn"`` (a spawn
    started here or by a collector leaves none set: ``rl_envs.processes.start_process``)."""
    chosen = multiprocessing.get_start_method(allow_none=True)
    pool.start(multiprocessing.get_context(chosen or "spawn"), fns, kwargs, num_sub_threads)
