"""The arguments of ``SerialEnv`` and ``ParallelEnv``, checked before any sub-env is built.

One constructor and one kwargs dict per worker, TorchRL's batched-env arguments refused
naming what to use instead, the sub-envs' specs compared, and what cannot reach a worker
process refused before one starts. Each error names the argument, what was expected and
what was received.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rl_envs._batched_worker import SPEC_NAMES
from rl_envs.processes import dumps as portable_dumps
from rl_envs.processes import env_constructors

__all__ = ["TORCHRL_ONLY", "check_args", "check_picklable", "check_same_specs"]


TORCHRL_ONLY = {
    "shared_memory": "ParallelEnv's workers always write into shared memory; SerialEnv needs none",
    "memmap": "the batched buffers live in shared memory, never in memory-mapped files",
    "mp_start_method": (
        "workers start with multiprocessing.set_start_method's method when one was set, "
        "else 'spawn' (TorchRL's default rule)"
    ),
    "use_buffers": "steps always go through preallocated buffers",
    "num_threads": (
        "num_sub_threads= sets torch's threads in each worker; this process keeps its own"
    ),
    "daemon": (
        "workers are never daemonic (so that a worker may start processes); close() stops them"
    ),
}
"""TorchRL batched-env arguments with no counterpart here, and what to do instead."""


def check_args(num_workers: Any, create_env_fn: Any, create_env_kwargs: Any,
                torchrl_only: Mapping[str, Any]) -> tuple[list, list[dict]]:
    """Validate the constructor arguments.

    Returns:
        One constructor and one kwargs dict per worker.
    """
    torchrl_only = dict(torchrl_only)
    torchrl_only.pop("serial_for_single", None)  # TorchRL's; ParallelEnv.__new__ reads it
    device = torchrl_only.pop("device", None)
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"device: the sub-envs run on the CPU here; expected None or 'cpu', "
                         f"received {device!r}")
    for name in torchrl_only:  # a TorchRL argument names what to use instead; any other is a typo
        reason = TORCHRL_ONLY.get(name)
        raise TypeError(f"{name}: TorchRL's argument is not supported here; {reason}" if reason
                        else f"got an unexpected keyword argument {name!r}")
    fns = env_constructors(create_env_fn, num_workers)
    if create_env_kwargs is None:
        return fns, [{} for _ in range(num_workers)]
    if isinstance(create_env_kwargs, Mapping):
        return fns, [dict(create_env_kwargs) for _ in range(num_workers)]
    if isinstance(create_env_kwargs, Sequence) and all(
        isinstance(k, Mapping) for k in create_env_kwargs
    ):
        if len(create_env_kwargs) != num_workers:
            raise ValueError(
                f"create_env_kwargs: expected one dict per worker ({num_workers}), "
                f"received {len(create_env_kwargs)}"
            )
        return fns, [dict(k) for k in create_env_kwargs]
    raise TypeError(
        f"create_env_kwargs: expected a dict or a list of {num_workers} dicts, "
        f"received {type(create_env_kwargs).__name__}"
    )


def check_same_specs(metas: list[dict[str, Any]]) -> None:
    """Every sub-env must have worker 0's batch size, device and specs.

    The error names the first worker and spec that differ.
    """
    for i, meta in enumerate(metas[1:], start=1):
        for name in ("batch_size", "device", *SPEC_NAMES):
            if meta[name] != metas[0][name]:
                raise ValueError(
                    f"create_env_fn: every sub-env must have the same specs; worker {i}'s {name} "
                    f"differs from worker 0's:\n{meta[name]!r}\nvs\n{metas[0][name]!r}"
                )


def check_picklable(fns: list[Any], kwargs: list[dict]) -> None:
    """Fail here, before any process starts, on what cannot reach a worker at all (by
    reference or by value); the error names the argument."""
    create_env_fn = fns[0] if all(fn is fns[0] for fn in fns) else fns
    for name, obj in (("create_env_fn", create_env_fn), ("create_env_kwargs", kwargs)):
        portable_dumps(obj, name)
