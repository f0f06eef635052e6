"""``CollectorActor``: the object each Ray actor of a ``RayCollector`` hosts.

It builds one collector, gives it the actor's index for trajectory ids and profiling, and
answers the driver's commands (``collect``, ``map_fn``, profiling, timings).
"""

from __future__ import annotations

import os
from typing import Any

from rl_profiling import ProfileConfig, Timing
from tensordict import TensorDictBase

from rl_collectors._ray_weight_sync import RayWeightsReader, import_ray
from rl_collectors._worker import bind_hosted, resolve_call

__all__ = ["CollectorActor"]


class CollectorActor:
    """The object each Ray actor hosts: one collector and the commands it answers.

    A plain class: :class:`RayCollector` wraps it with ``ray.remote`` at start-up, so
    importing this module does not import Ray.
    """

    def __init__(self, collector_class: Any, create_env_fn: Any, policy: Any, frames_per_batch: int,
                 kwargs: dict[str, Any], actor_idx: int, num_actors: int) -> None:
        self.idx = actor_idx
        self.collector = c = collector_class(
            create_env_fn, policy, frames_per_batch=frames_per_batch, total_frames=-1, **kwargs
        )
        bind_hosted(c, actor_idx, num_actors)  # ids k * num_actors + idx
        self.reader = RayWeightsReader()

    def ready(self) -> dict[str, Any]:
        """Where this actor runs and how many sub-envs its env has."""
        ray = import_ray()
        env = self.collector.env
        return {
            "idx": self.idx,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "num_rows": env.batch_size.numel(),
            "batch_dims": len(env.batch_size),
        }

    def collect(self, steps: int, latest: tuple[Any, int] | None) -> TensorDictBase:
        """Pull newer weights, then collect ``steps`` steps and return the batch."""
        c = self.collector
        self.reader.pull(c, latest)
        if not hasattr(c, "collect_view"):  # a collector class without the step-count hook
            return c.rollout()
        view = c.collect_view(steps)
        return view if view.batch_size[-1] == c.steps else view.clone()  # Ray serialises it

    def map_fn(self, name: Any, args: tuple) -> Any:
        return resolve_call(self.collector, name)(*args)

    def enable_profile(self, config: ProfileConfig) -> None:
        self.collector.enable_profile(config=config)

    def disable_profile(self) -> str | None:
        return self.collector.disable_profile()

    def timing(self) -> Timing:
        return self.collector.timing
