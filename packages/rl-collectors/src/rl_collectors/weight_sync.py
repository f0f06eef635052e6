"""Weight synchronisation between the trainer's policy and the collectors' copies.

- :class:`VanillaWeightUpdater`: same process; copies weights into the collector's policy
  in place (nothing at all when they are already the same tensors).
- :class:`MultiProcessedWeightUpdater`: one shared-memory copy of the weights that the
  workers read from. ``push`` writes it in place under a sequence counter (a seqlock:
  odd while writing), so a worker never copies half-written weights and never blocks
  the trainer; the version is the number of completed pushes.
- :class:`SharedWeightsReader`: the worker's side of it.

Every updater counts versions, so a batch can be tagged with the version that produced
it (``("collector", "policy_version")``). As in TorchRL, an updater may be built without
arguments (``VanillaWeightUpdater()``) and handed to a collector (``weight_updater=``),
which binds it to its policy (:meth:`WeightUpdaterBase.bind`); ``update_weights`` is
TorchRL's name of ``push``.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.nn.parameter import is_lazy

from rl_collectors.exceptions import CollectorError

__all__ = [
    "LatestWeightsUpdater",
    "MultiProcessedWeightUpdater",
    "SharedWeightsReader",
    "VanillaWeightUpdater",
    "WeightUpdaterBase",
    "bind_updater",
    "has_lazy",
    "weights_of",
]


def weights_of(policy_or_weights: Any) -> TensorDictBase | None:
    """The weights (parameters and buffers, detached) of a module, or a TensorDict as is.

    Returns ``None`` for a policy without weights (a plain function, ``RandomPolicy``).
    """
    if isinstance(policy_or_weights, TensorDictBase):
        return policy_or_weights
    if isinstance(policy_or_weights, torch.nn.Module):
        if has_lazy(policy_or_weights):
            return _initialised_weights(policy_or_weights)
        weights = TensorDict.from_module(policy_or_weights, as_module=False)
        return weights.detach() if not weights.is_empty() else None
    if policy_or_weights is None or callable(policy_or_weights):
        return None
    raise TypeError(
        f"weights: expected an nn.Module, a TensorDict of weights or None, "
        f"got {type(policy_or_weights).__name__}"
    )


def has_lazy(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds lazy parameters or buffers not yet initialised."""
    tensors = (*module.parameters(), *module.buffers())
    return any(is_lazy(t) for t in tensors)


def _initialised_weights(module: torch.nn.Module) -> TensorDictBase:
    """The weights of ``module`` that exist yet (lazy ones not initialised are left out:
    there is nothing to send until the module's first forward)."""
    named = (*module.named_parameters(), *module.named_buffers())
    out = TensorDict()
    for name, t in named:
        if not is_lazy(t):
            out.set(tuple(name.split(".")), t.detach())
    return out


def _materialise_like(module: torch.nn.Module, weights: TensorDictBase) -> None:
    """Materialise ``module``'s lazy tensors that ``weights`` holds, to their shapes."""
    for name, t in (*module.named_parameters(), *module.named_buffers()):
        key = tuple(name.split("."))
        if is_lazy(t) and key in weights.keys(True, True):
            src = weights.get(key)
            t.materialize(src.shape, device=src.device, dtype=src.dtype)


_UNBOUND: Any = object()  # an updater built without a target, until a collector binds it


class WeightUpdaterBase:
    """Push new policy weights to a collector's policy (or policies) and count versions.

    Subclasses implement :meth:`_push`. Call the updater (or :meth:`push`) with the new
    weights, an ``nn.Module`` or ``None`` (the source registered at construction).

    Args:
        source: where weights come from when ``push()`` gets none: the trainer's policy
            (an ``nn.Module``) or a TensorDict of weights. May be ``None``.

    Examples:
        >>> import torch
        >>> class Counting(WeightUpdaterBase):
        ...     def _push(self, weights):
        ...         pass
        >>> updater = Counting(torch.nn.Linear(2, 2))
        >>> updater(), updater.version
        (1, 1)
    """

    def __init__(self, source: Any = None) -> None:
        self._source = source
        self._version = 0

    def bind(self, target: Any, source: Any = None) -> None:
        """Called by the collector that receives this updater: ``target`` is the
        collector's policy, ``source`` the policy the user gave it (the default weights
        of ``push()`` when none was given at construction)."""
        if self._source is None:
            self._source = source

    @property
    def version(self) -> int:
        """Number of completed pushes."""
        return self._version

    def _push(self, weights: TensorDictBase) -> None:
        raise NotImplementedError

    def restore_version(self, version: int) -> None:
        """Continue counting from ``version`` (a checkpoint's): the next push returns
        ``version + 1``. Called by the collectors' ``load_state_dict``."""
        self._version = int(version)

    def _check_bound(self) -> None:
        """Raise ``CollectorError`` when the updater has nowhere to write yet."""

    def latest(self) -> tuple[Any, int] | None:
        """What a transport sends with its next request: ``(weights, version)``; ``None``
        when there is nothing to send (nothing pushed, or the hosts read shared memory)."""
        return None

    def push(self, policy_or_weights: Any = None) -> int:
        """Write new weights where the collector's policy reads them; returns the new version.

        Raises:
            CollectorError: no weights given and no source registered with weights, or
                an updater built without arguments that no collector bound yet.
        """
        self._check_bound()
        weights = weights_of(policy_or_weights if policy_or_weights is not None else self._source)
        if weights is None and (policy_or_weights is not None or self._source is not None):
            what = type(policy_or_weights or self._source).__name__
            raise CollectorError(
                f"update_policy_weights_: the policy {what} has no weights to send"
            )
        if weights is not None:
            self._push(weights)
        self._version += 1
        return self._version

    def update_weights(self, weights: Any = None) -> int:
        """TorchRL's name of :meth:`push`: write ``weights`` (``None``: the source's)."""
        return self.push(weights)

    __call__ = push


class VanillaWeightUpdater(WeightUpdaterBase):
    """Copy weights into a policy living in this process, in place.

    Args:
        target: the collector's policy (an ``nn.Module``), or ``None`` for a policy
            without weights. Leave it out (``VanillaWeightUpdater()``, TorchRL's form)
            and pass the updater to a collector (``weight_updater=``): the collector
            binds it to its own policy.
        source: default weights for ``push()`` (the trainer's policy).

    Raises:
        CollectorError: ``push`` on an updater that no collector bound yet.

    Examples:
        >>> import torch
        >>> target, trainer = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
        >>> updater = VanillaWeightUpdater(target, source=trainer)
        >>> updater.push()
        1
        >>> bool((target.weight == trainer.weight).all())
        True
    """

    def __init__(self, target: Any = _UNBOUND, source: Any = None) -> None:
        super().__init__(source)
        self._lazy_target: torch.nn.Module | None = None
        self._target = target if target is _UNBOUND else self._weights_of_target(target)

    def _weights_of_target(self, target: Any) -> Any:
        """The target's weights; a target with lazy modules is re-read at each push."""
        if isinstance(target, torch.nn.Module) and has_lazy(target):
            self._lazy_target = target
        return weights_of(target)

    def bind(self, target: Any, source: Any = None) -> None:
        super().bind(target, source)
        if self._target is _UNBOUND:
            self._target = self._weights_of_target(target)

    def _check_bound(self) -> None:
        if self._target is _UNBOUND:
            raise CollectorError(
                "VanillaWeightUpdater: not bound to a policy; pass it to a collector "
                "(weight_updater=...) or give the target policy"
            )

    def _push(self, weights: TensorDictBase) -> None:
        if self._lazy_target is not None:  # materialise what the source has, then re-read
            _materialise_like(self._lazy_target, weights)
            self._target = weights_of(self._lazy_target)
            if not has_lazy(self._lazy_target):
                self._lazy_target = None
        if self._target is None:
            raise CollectorError("update_policy_weights_: the collector's policy has no weights")
        if weights.is_empty():
            return
        with torch.no_grad():
            self._target.update_(
                weights.to(self._target.device) if self._target.device else weights
            )


class MultiProcessedWeightUpdater(WeightUpdaterBase):
    """Shared-memory weights updated in place for worker processes, with a version counter.

    Build it in the main process from the trainer's policy; hand :attr:`shared` and
    :attr:`sequence` to the workers (they pickle to shared memory) and read them there
    with :class:`SharedWeightsReader`.

    Args:
        source: the trainer's policy (or a TensorDict of its weights). Leave it out
            (TorchRL's zero-argument form) and pass the updater to a multi-process
            collector (``weight_updater=``): the collector binds it to its policy.

    Raises:
        CollectorError: the source has no weights, or ``push`` before a source is bound.

    Examples:
        >>> import torch
        >>> policy = torch.nn.Linear(2, 1)
        >>> updater = MultiProcessedWeightUpdater(policy)
        >>> with torch.no_grad():
        ...     _ = policy.bias.fill_(3.0)
        >>> updater.push()
        1
        >>> updater.shared["bias"]
        tensor([3.])
        >>> worker_policy = torch.nn.Linear(2, 1)
        >>> SharedWeightsReader(updater.shared, updater.sequence).pull(worker_policy)
        1
        >>> worker_policy.bias
        Parameter containing:
        tensor([3.], requires_grad=True)
    """

    def __init__(self, source: Any = None) -> None:
        super().__init__(None)
        self.shared: TensorDictBase | None = None
        self.sequence = torch.zeros((), dtype=torch.int64).share_memory_()
        if source is not None:
            self.bind(None, source)

    def bind(self, target: Any, source: Any = None) -> None:
        """Allocate the shared copy from ``source``'s weights (once; later calls keep it)."""
        if self.shared is not None:
            return
        if isinstance(source, torch.nn.Module) and has_lazy(source):
            raise CollectorError(
                f"MultiProcessedWeightUpdater: the source {type(source).__name__} has lazy "
                "modules not yet initialised, so the workers' shared copy cannot be sized; "
                "run the policy once first (e.g. policy(env.reset()))"
            )
        weights = weights_of(source)
        if weights is None:
            raise CollectorError(
                f"MultiProcessedWeightUpdater: the source {type(source).__name__} has no weights"
            )
        self._source = source
        self.shared = weights.clone().share_memory_()

    def _check_bound(self) -> None:
        if self.shared is None:
            raise CollectorError("MultiProcessedWeightUpdater: no source yet; pass it to a "
                                 "collector (weight_updater=...) or give the trainer's policy")

    def restore_version(self, version: int) -> None:
        """Continue from ``version``: the source policy's current weights (load them
        first) are written to the shared copy, which the workers read again before
        their next batch and tag with ``version``."""
        super().restore_version(version)
        weights = weights_of(self._source)
        if self.shared is not None and weights is not None:
            with torch.no_grad():
                self.shared.update_(weights)
        self.sequence.fill_(2 * int(version))

    def _push(self, weights: TensorDictBase) -> None:
        with torch.no_grad():
            self.sequence += 1  # odd: a write is in progress
            self.shared.update_(weights)
            self.sequence += 1


class LatestWeightsUpdater(WeightUpdaterBase):
    """Keep the newest weights, packed once per push, for a transport that sends them to
    each host with its next request (torch.distributed, RPC, Ray).

    Args:
        source: the trainer's policy (or a TensorDict of its weights).
        pack: ``weights -> payload`` (the weights are detached and on the CPU); default:
            a copy.

    Examples:
        >>> import torch
        >>> updater = LatestWeightsUpdater(torch.nn.Linear(2, 1))
        >>> updater.latest() is None, updater.push(), updater.latest()[1]
        (True, 1, 1)
    """

    def __init__(self, source: Any = None, pack: Any = None) -> None:
        super().__init__(source)
        self._pack = pack if pack is not None else TensorDictBase.clone
        self.payload: Any = None

    def _push(self, weights: TensorDictBase) -> None:
        self.payload = self._pack(weights.detach().to("cpu"))

    def latest(self) -> tuple[Any, int] | None:
        """``(payload, version)`` of the newest weights, ``None`` before the first push."""
        return None if self.payload is None else (self.payload, self.version)


def bind_updater(given: Any, target: Any, source: Any) -> Any:
    """A single-process collector's updater: ``given`` bound to its policy, or a
    :class:`VanillaWeightUpdater` from ``source`` (the user's policy) to ``target``."""
    if given is None:
        return VanillaWeightUpdater(target, source=source)
    if isinstance(given, WeightUpdaterBase):
        given.bind(target, source)
    return given


class SharedWeightsReader:
    """The worker's side of :class:`MultiProcessedWeightUpdater`: copy new weights in.

    Args:
        shared: the updater's ``shared`` weights.
        sequence: the updater's ``sequence`` counter.
        timeout: seconds to wait for a push in progress to finish.
    """

    def __init__(
        self, shared: TensorDictBase, sequence: torch.Tensor, timeout: float = 10.0
    ) -> None:
        self.shared, self.sequence, self.timeout = shared, sequence, timeout
        self.version = 0

    def pull(self, target: Any) -> int:
        """Copy the shared weights into ``target`` if they changed; return their version."""
        if int(self.sequence) == 2 * self.version:
            return self.version
        weights = weights_of(target)
        deadline = time.monotonic() + self.timeout
        while True:
            before = int(self.sequence)
            if before % 2 == 0:
                with torch.no_grad():
                    weights.update_(self.shared)
                if int(self.sequence) == before:
                    self.version = before // 2
                    return self.version
            if time.monotonic() > deadline:
                raise CollectorError(
                    f"SharedWeightsReader: a weight push did not finish within {self.timeout} s"
                )
            time.sleep(0.0005)
