"""Weight synchronisation for Ray actors: one ``ray.put`` per update, actors pull.

- :class:`RayWeightUpdater` (driver): ``push`` puts the weights in Ray's object store
  once (``ray.put``) and bumps the version; :meth:`RayWeightUpdater.latest` is the
  ``(ObjectRef, version)`` pair handed to the actors with each collect call.
- :class:`RayWeightsReader` (actor): when the version it is handed is newer than the
  one it holds, it fetches the weights from the object store (once per version and
  node) and copies them into the actor's policy through the Collector's own updater.

Ray is the ``[ray]`` extra of rl-collectors: :func:`import_ray` imports it lazily.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from rl_collectors.exceptions import CollectorError
from rl_collectors.weight_sync import WeightUpdaterBase, weights_of

__all__ = ["RayWeightUpdater", "RayWeightsReader", "import_ray"]

RAY_MISSING = (
    "Ray is not installed: RayCollector needs the [ray] extra, `pip install rl-collectors[ray]`"
)


def import_ray() -> Any:
    """Import and return the ``ray`` module, with an install hint when it is missing.

    Raises:
        ModuleNotFoundError: Ray is not installed (the message says how to install it).
    """
    if importlib.util.find_spec("ray") is None:
        raise ModuleNotFoundError(RAY_MISSING, name="ray")
    import ray

    return ray


class RayWeightUpdater(WeightUpdaterBase):
    """Put new policy weights once in Ray's object store; actors pull them by version.

    Each :meth:`push` serialises the weights (moved to the CPU, detached) with
    ``ray.put`` exactly once, whatever the number of actors, and increments
    :attr:`version`. Actors receive ``latest()`` (the ``ObjectRef`` and its version)
    with every collect request and fetch the weights only when the version is newer than
    theirs, so an update costs one object-store copy plus one fetch per node, and
    batches carry the version that produced them (``("collector", "policy_version")``).
    The previous object is released when the next one is put.

    Args:
        source: the trainer's policy (an ``nn.Module``) or a TensorDict of its weights,
            read by ``push()`` when called without weights. ``None`` (TorchRL's
            ``RayWeightUpdater()``): the :class:`~rl_collectors.RayCollector` that
            receives it as ``weight_updater=`` binds its policy.

    Raises:
        CollectorError: ``source`` has no weights.

    Examples:
        >>> import torch
        >>> updater = RayWeightUpdater(torch.nn.Linear(2, 1))
        >>> updater.version, updater.latest()
        (0, None)
        >>> # with Ray running, each push is one ray.put:
        >>> updater.push()  # doctest: +SKIP
        1
    """

    def __init__(self, source: Any = None) -> None:
        if source is not None and weights_of(source) is None:
            raise CollectorError(
                f"RayWeightUpdater: source: expected a policy with weights or a TensorDict of "
                f"weights, got {type(source).__name__} (no weights)"
            )
        super().__init__(source)
        self.ref: Any = None

    def _push(self, weights: Any) -> None:
        ray = import_ray()
        self.ref = ray.put(weights.detach().to("cpu"))

    def latest(self) -> tuple[Any, int] | None:
        """``(ObjectRef, version)`` of the newest weights, ``None`` before the first push."""
        return None if self.ref is None else (self.ref, self.version)


class RayWeightsReader:
    """The actor's side of :class:`RayWeightUpdater`: fetch and load newer weights.

    Args:
        timeout: seconds a fetch from the object store may take.
    """

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self.version = 0

    def pull(self, collector: Any, latest: tuple[Any, int] | None) -> int:
        """Load the weights of ``latest`` into ``collector`` if newer; return the version.

        The weights go through ``collector.update_policy_weights_`` (the Collector's
        own weight updater); the collector's ``policy_version`` is set to the driver's
        version so batches are tagged with it.
        """
        if latest is None or latest[1] <= self.version:
            return self.version
        ref, version = latest
        ray = import_ray()
        weights = ray.get(ref, timeout=self.timeout)
        collector.update_policy_weights_(weights)
        collector.policy_version = self.version = version
        return version
