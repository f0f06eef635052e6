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

from tensordict import TensorDictBase

__all__ = ["BaseCollector"]


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
        >>> isinstance(collector, BaseCollector), sizes
        (True, [4])
    """

    def _unsupported(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"{type(self).__name__} does not support {what}")

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        raise self._unsupported("iteration")

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
