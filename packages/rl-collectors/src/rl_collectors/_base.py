"""``BaseCollector``: the interface every collector shares (TorchRL 0.14's base name).

``Collector``, ``MultiCollector`` (and its sync / async / single-worker forms),
``AsyncBatchedCollector`` and the remote collectors (``RayCollector``,
``DistributedDataCollector``, ``RPCDataCollector``) derive from it, so
``isinstance(c, BaseCollector)`` holds for each; TorchRL's older name
``DataCollectorBase`` is the same class.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rl_envs import FastPathEnv
from tensordict import TensorDictBase

__all__ = ["BaseCollector", "build_env"]


def build_env(create_env_fn: Any) -> FastPathEnv:
    """The env itself when ``create_env_fn`` is one, else ``create_env_fn()``, checked."""
    env = create_env_fn if isinstance(create_env_fn, FastPathEnv) else None
    if env is None and callable(create_env_fn):
        env = create_env_fn()
    if not isinstance(env, FastPathEnv):
        got = type(env if callable(create_env_fn) else create_env_fn).__name__
        raise TypeError(
            "create_env_fn: expected an rl_envs.EnvBase (any rl_envs.FastPathEnv) or a "
            f"callable returning one, got {got}"
        )
    return env


class BaseCollector:
    """What a training loop may call on any collector.

    Iterate over it for batches; push new weights with :meth:`update_policy_weights_`;
    stop it with :meth:`shutdown` (or use it as a context manager). A method a
    collector does not support raises ``NotImplementedError`` naming the collector.

    Examples:
        >>> from rl_collectors import BaseCollector, Collector
        >>> from rl_envs import GymEnv
        >>> with Collector(GymEnv("CartPole-v1", num_envs=2), frames_per_batch=4,
        ...                total_frames=4) as collector:
        ...     sizes = [batch.numel() for batch in collector]
        >>> isinstance(collector, BaseCollector), sizes, len(collector)
        (True, [4], 1)
    """

    def _unsupported(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not support {what}")

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        raise self._unsupported("iteration")

    def __len__(self) -> int:
        """Batches the iteration yields, ``ceil(total_frames / frames_per_batch)`` (TorchRL's).

        Raises:
            TypeError: an endless collector (``total_frames=-1``) has no length.
        """
        total = getattr(self, "total_frames", -1)
        per_batch = getattr(self, "frames_per_batch", None)
        if total is None or total < 0 or not per_batch:
            raise TypeError(
                f"{type(self).__name__} has no length: total_frames={total} (endless); give "
                "total_frames= to count its batches"
            )
        return -(-total // per_batch)

    def __bool__(self) -> bool:
        return True  # not len(): an endless collector is still a collector

    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Push the trainer's weights (``None``: the policy given at construction)."""
        raise self._unsupported("update_policy_weights_")

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed the env(s); returns the next seed to use."""
        raise self._unsupported("set_seed")

    def state_dict(self) -> dict[str, Any]:
        """The collector's state (frames, trajectory counters)."""
        raise self._unsupported("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        raise self._unsupported("load_state_dict")

    def shutdown(self) -> None:
        """Release the envs and any worker; idempotent."""
        raise self._unsupported("shutdown")

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
