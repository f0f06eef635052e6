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

from typing import Any

from rl_collectors._launchers import import_optional
from rl_collectors.exceptions import CollectorError
from rl_collectors.weight_sync import LatestWeightsUpdater, weights_of

__all__ = ["RayWeightUpdater", "RayWeightsReader", "import_ray"]

RAY_MISSING = (
    "Ray is not installed: RayCollector needs the [ray] extra, `pip install rl-collectors[ray]`"
)


def import_ray() -> Any:
    """Import and return the ``ray`` module, with an install hint when it is missing."""
    return import_optional("ray", RAY_MISSING)


def _put(weights: Any) -> Any:
    return import_ray().put(weights)


class RayWeightUpdater(LatestWeightsUpdater):
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
        super().__init__(source, pack=_put)


class RayWeightsReader:
    """The actor's side of :class:`RayWeightUpdater`: fetch and load newer weights.

    Args:
        timeout: seconds a fetch from the object store may take.
    """

    def __init__(self, timeout: float = 300.0) -> None:
        self.timeout = timeout
        self.version = 0

    def pull(self, host: Any, latest: tuple[Any, int] | None) -> int:
        """Load the weights of ``latest`` into ``host`` (a ``HostRuntime``) if newer;
        return the version the host's batches are tagged with."""
        if latest is None or latest[1] <= self.version:
            return self.version
        ref, version = latest
        host.load_weights(import_ray().get(ref, timeout=self.timeout), version)
        self.version = version
        return version
