"""Argument checks of ``AsyncBatchedCollector``, run before anything is built.

The collector's own arguments (``num_envs``, batch sizes, ``server_timeout``,
``backend``) and the :class:`~rl_collectors.CollectorOptions` that do not apply to
independently stepping single envs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BACKENDS", "check_async_args"]

BACKENDS = ("threading", "multiprocessing")
_UNSUPPORTED = {"max_frames_per_traj": None, "init_random_frames": 0, "reset_at_each_iter": False,
                "env_device": None, "storing_device": None}


def check_async_args(num_envs: Any, max_bs: Any, min_bs: Any, server_timeout: Any, backend: Any,
                     options: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first argument out of range.

    Args:
        num_envs: number of env workers (an int >= 1).
        max_bs: ``max_batch_size`` (an int >= 1, or ``None`` for ``num_envs``).
        min_bs: ``min_batch_size`` (an int >= 1, at most the maximum).
        server_timeout: seconds (a number >= 0).
        backend: one of :data:`BACKENDS`.
        options: the ``CollectorOptions`` keywords given to the collector.

    Raises:
        ValueError: an argument is out of range, or an option that does not apply.
    """
    for name, value, allow_none in (("num_envs", num_envs, False), ("max_batch_size", max_bs, True),
                                    ("min_batch_size", min_bs, False)):
        if value is None and allow_none:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if min_bs > (max_bs or num_envs):
        raise ValueError(
            f"min_batch_size: expected <= max_batch_size ({max_bs or num_envs}), got {min_bs}"
        )
    if (
        isinstance(server_timeout, bool)
        or not isinstance(server_timeout, (int, float))
        or server_timeout < 0
    ):
        raise ValueError(
            f"server_timeout: expected a number of seconds >= 0, got {server_timeout!r}"
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {list(BACKENDS)}, got {backend!r}")
    for name, default in _UNSUPPORTED.items():
        if name in options and options[name] != default:
            raise ValueError(
                f"{name}: not supported by AsyncBatchedCollector (expected {default!r}), "
                f"got {options[name]!r}"
            )
