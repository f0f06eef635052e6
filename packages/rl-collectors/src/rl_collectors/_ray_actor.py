"""``CollectorActor``: the object each Ray actor of a ``RayCollector`` hosts.

It is the one host runtime (:class:`~rl_collectors._host.HostRuntime`) with Ray's I/O:
``collect(steps, latest)`` pulls newer weights from the object store, collects and
returns the batch (Ray serialises it); ``call`` answers ``map_fn``, profiling and timings.
"""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase

from rl_collectors._host import HostRuntime, HostSpec
from rl_collectors._ray_weight_sync import RayWeightsReader, import_ray

__all__ = ["CollectorActor"]


class CollectorActor(HostRuntime):
    """The object each Ray actor hosts: one collector and the commands it answers.

    A plain class: :class:`RayCollector` wraps it with ``ray.remote`` at start-up, so
    importing this module does not import Ray.
    """

    def __init__(self, spec: HostSpec) -> None:
        super().__init__(spec)
        self.reader = RayWeightsReader()

    def ready(self) -> dict[str, Any]:
        """Where this actor runs and how many sub-envs its env has."""
        return {**self.info(), "node_id": import_ray().get_runtime_context().get_node_id()}

    def collect(self, steps: int, latest: tuple[Any, int] | None) -> TensorDictBase:
        """Pull newer weights, then collect ``steps`` steps and return the batch."""
        self.reader.pull(self, latest)
        view = self.batch(steps)
        full = view.batch_size[-1] == self.template.batch_size[-1]
        return view if full else view.clone()  # Ray serialises it
