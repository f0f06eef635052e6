"""``RemoteModuleWeightUpdater``: TorchRL's base for updaters that push to remote workers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensordict import TensorDictBase

from rl_collectors.exceptions import CollectorError
from rl_collectors.weight_sync import WeightUpdaterBase

__all__ = ["RemoteModuleWeightUpdater"]


class RemoteModuleWeightUpdater(WeightUpdaterBase):
    """Push the server's weights to remote workers, one worker at a time (TorchRL's
    ``RemoteModuleWeightUpdater``).

    A subclass says how to reach one worker and which workers there are, with TorchRL's
    hooks:

    - ``_sync_weights_with_worker(worker_id, server_weights)`` (required): send the weights
      to one worker;
    - ``all_worker_ids()`` (required): the ids of every worker;
    - ``_maybe_map_weights(server_weights)`` (optional): transform the weights once before
      they are sent (default: unchanged);
    - ``_get_server_weights()`` (optional): the weights when ``push()`` is called without
      any (default: the ``source`` given at construction or bound by a collector).

    ``push(weights=None, worker_ids=None)`` (also ``update_weights`` and calling the
    updater) maps the weights once and syncs every worker in ``worker_ids`` (default: all)
    and returns the new :attr:`version`.

    Args:
        source: the trainer's policy (an ``nn.Module``) or a TensorDict of its weights.

    Raises:
        NotImplementedError: on ``push``, a required hook is not implemented.
        CollectorError: ``worker_ids`` names a worker ``all_worker_ids()`` does not list.

    Examples:
        >>> import torch
        >>> workers = {0: torch.nn.Linear(2, 1), 1: torch.nn.Linear(2, 1)}
        >>> class ToModules(RemoteModuleWeightUpdater):
        ...     def all_worker_ids(self):
        ...         return list(workers)
        ...     def _sync_weights_with_worker(self, worker_id, server_weights):
        ...         server_weights.to_module(workers[worker_id])
        >>> trainer_policy = torch.nn.Linear(2, 1)
        >>> updater = ToModules(trainer_policy)
        >>> updater.push(worker_ids=[1])
        1
        >>> bool((workers[1].weight == trainer_policy.weight).all())
        True
    """

    def __init__(self, source: Any = None) -> None:
        super().__init__(source)
        self._worker_ids: Sequence[Any] | None = None

    def all_worker_ids(self) -> list[Any]:
        """The ids of every worker the weights go to."""
        raise NotImplementedError(
            f"{type(self).__name__}.all_worker_ids: a RemoteModuleWeightUpdater subclass must "
            "return the ids of its workers"
        )

    def _sync_weights_with_worker(self, worker_id: Any, server_weights: Any) -> None:
        raise NotImplementedError(
            f"{type(self).__name__}._sync_weights_with_worker: a RemoteModuleWeightUpdater "
            "subclass must send the weights to one worker"
        )

    def _maybe_map_weights(self, server_weights: TensorDictBase) -> Any:
        return server_weights

    def _get_server_weights(self) -> Any:
        return self._source

    def push(self, policy_or_weights: Any = None, worker_ids: Sequence[Any] | None = None) -> int:
        """Send the weights (``None``: :meth:`_get_server_weights`'s) to ``worker_ids``
        (``None``: every worker); returns the new version."""
        known = list(self.all_worker_ids())
        if worker_ids is not None:
            unknown = [w for w in worker_ids if w not in known]
            if unknown:
                raise CollectorError(
                    f"{type(self).__name__}.push: worker_ids: expected ids among {known}, "
                    f"got unknown {unknown}"
                )
        self._worker_ids = known if worker_ids is None else list(worker_ids)
        try:
            given = policy_or_weights if policy_or_weights is not None else (
                self._get_server_weights())
            return super().push(given)
        finally:
            self._worker_ids = None

    def update_weights(self, weights: Any = None, worker_ids: Sequence[Any] | None = None) -> int:
        """TorchRL's name of :meth:`push`."""
        return self.push(weights, worker_ids)

    __call__ = push

    def _push(self, weights: TensorDictBase) -> None:
        mapped = self._maybe_map_weights(weights)
        for worker_id in self._worker_ids or ():
            self._sync_weights_with_worker(worker_id=worker_id, server_weights=mapped)
