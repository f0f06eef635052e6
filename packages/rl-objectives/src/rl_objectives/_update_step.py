"""``make_update_step``: loss, backward, clip, optimiser step and target update as one call.

The whole learner step is one function, so it can be ``torch.compile``d as one graph and,
on CUDA, captured in a CUDA graph (LeanRL's recipe). Diagnostics come back detached; no
``.item()`` (no host synchronisation) happens inside.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rl_objectives._compile import compile_with_warmup
from rl_objectives._target_updaters import SoftUpdate

__all__ = ["UpdateStep", "make_update_step"]

logger = logging.getLogger(__name__)

_COMPILE_KEYS = ("warmup", "mode", "fullgraph", "backend", "dynamic", "options")


def _distribution_checks_off(fn: Callable) -> Callable:
    """``fn`` run with ``torch.distributions``' argument checks off (restored after).

    The checks (``validate_args``, on by default for ``torch.distributions.Normal`` and
    the others) test values on the host: a synchronisation that a CUDA graph cannot
    capture ("operation not permitted when stream is capturing"). The toolkit's own
    distributions never check; this turns the checks off for a user's too, in the
    warm-up and capture calls (replays run no Python).
    """

    def call(tensordict: TensorDictBase) -> TensorDictBase:
        dist = torch.distributions.Distribution
        before = dist._validate_args
        dist.set_default_validate_args(False)
        try:
            return fn(tensordict)
        finally:
            dist.set_default_validate_args(before)

    return call


def _is_loss_key(key: Any) -> bool:
    return isinstance(key, str) and (key == "loss" or key.startswith("loss_"))


def _total(out: TensorDictBase, keys: tuple[str, ...] | None = None) -> torch.Tensor:
    """The sum of the ``"loss"`` / ``"loss_*"`` entries, or of ``keys`` (from the first: no
    ``0 +`` op)."""
    if keys is None:
        terms = [v for k, v in out.items() if _is_loss_key(k)]
    else:
        terms = [out.get(k, None) for k in keys]
        if any(t is None for t in terms):
            missing = [k for k, t in zip(keys, terms, strict=True) if t is None]
            raise KeyError(f"loss_keys: {missing} not in the loss module's output; it has "
                           f"{sorted(map(str, out.keys()))}")
    if not terms:
        raise ValueError(f"the loss module's output has no 'loss' or 'loss_*' entry to "
                         f"backpropagate; got keys {sorted(map(str, out.keys()))}")
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _graph_count() -> int:
    """Graphs Dynamo has compiled in this process (grows on every (re)compilation)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


class UpdateStep:
    """One learner update: ``loss -> backward -> clip -> optimiser.step -> target update``.

    Built by :func:`make_update_step`, which documents the arguments. Calling it with a
    batch returns the loss module's output, detached, plus ``"grad_norm"`` when clipping.

    Attributes:
        compile_seconds: wall time of the calls that compiled, recompiled or captured a
            CUDA graph (warm-up calls excluded: they run eagerly at eager speed).
        recompiles: recompilations after the first compilation (a changed batch shape or
            key set); each one is logged as a warning.
        calls: calls so far.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl_objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="categorical")
        >>> step = make_update_step(loss, torch.optim.Adam(loss.parameters()),
        ...                         max_grad_norm=1.0)
        >>> td = TensorDict({"observation": torch.randn(4, 3),
        ...                  "action": torch.zeros(4, dtype=torch.long),
        ...                  ("next", "observation"): torch.randn(4, 3),
        ...                  ("next", "reward"): torch.ones(4, 1),
        ...                  ("next", "done"): torch.zeros(4, 1, dtype=torch.bool),
        ...                  ("next", "terminated"): torch.zeros(4, 1, dtype=torch.bool)}, [4])
        >>> sorted(step(td).keys())
        ['grad_norm', 'loss']
    """

    def __init__(self, loss_module: nn.Module, optimizer: torch.optim.Optimizer,
                 target_updater: Any, max_grad_norm: float | None,
                 compile_kwargs: dict[str, Any] | None, cudagraphs: bool,
                 timing: Any = None, loss_keys: tuple[str, ...] | None = None) -> None:
        self.loss_module, self.optimizer = loss_module, optimizer
        self.loss_keys = loss_keys
        self.timing = None if compile_kwargs is not None or cudagraphs else timing
        self.max_grad_norm = max_grad_norm
        self._params = [p for g in optimizer.param_groups for p in g["params"]]
        self._soft_pairs: tuple[list, list, float] | None = None
        self._eager_updater = None  # stepped after the (compiled) step: HardUpdate, others
        if isinstance(target_updater, SoftUpdate):
            pairs = target_updater.loss_module.target_pairs()
            targets = [t for _, ts in pairs for t in ts]
            onlines = [o for os_, _ in pairs for o in os_]
            self._soft_pairs = (targets, onlines, target_updater.tau)
        elif target_updater is not None:
            self._eager_updater = target_updater
        self.compile_seconds, self.recompiles, self.calls = 0.0, 0, 0
        self._compiling = compile_kwargs is not None
        self._warmup = compile_kwargs.pop("warmup", 1) if self._compiling else 0
        self._ready_at = self._warmup + 1 if self._compiling else 0  # the compiling call
        # a graphed step hands its diagnostics out as one flat buffer (one copy out of the
        # graph's static output, not one per entry), unpacked into views by ``_unpack``
        self._layout: list[tuple[str, torch.Size]] | None = None
        fn: Callable = self._update_packed if cudagraphs else self._update
        if self._compiling:
            fn = compile_with_warmup(fn, warmup=self._warmup, **compile_kwargs)
        if cudagraphs:
            from tensordict.nn import CudaGraphModule

            # CudaGraphModule runs its own warm-up calls, then captures: after the compile
            # warm-up and the compiling call, two more calls warm the compiled graph.
            self._ready_at += 2 + 1
            fn = _distribution_checks_off(CudaGraphModule(fn, warmup=self._ready_at - 1))
        self._fn = fn

    def _update(self, tensordict: TensorDictBase) -> TensorDictBase:
        self._zero_grad()  # first, as LeanRL: captured with the rest
        out = self.loss_module(tensordict)
        total = _total(out, self.loss_keys)
        result = out.detach()  # before backward: only detached tensors live past its graph break
        total.backward()
        self._step(result)
        return result

    def _update_packed(self, tensordict: TensorDictBase) -> Any:
        """``_update`` with its entries concatenated into one 1-D tensor when they share a
        dtype and are not nested (the losses' scalars); their names and shapes are kept in
        ``self._layout`` (a side effect that Dynamo replays after a compiled call)."""
        result = self._update(tensordict)
        keys = list(result.keys())
        values = [result.get(k) for k in keys]
        if (result.batch_size or not values or not all(isinstance(k, str) for k in keys)
                or any(not isinstance(v, torch.Tensor) or v.dtype != values[0].dtype
                       for v in values)):
            self._layout = None
            return result
        self._layout = [(k, v.shape) for k, v in zip(keys, values, strict=True)]
        return torch.cat([v.reshape(-1) for v in values])

    def _unpack(self, out: Any) -> Any:
        if self._layout is None or not isinstance(out, torch.Tensor):
            return out
        parts = out.split([s.numel() for _, s in self._layout])
        return TensorDict({k: p.view(s) for (k, s), p in zip(self._layout, parts, strict=True)},
                          batch_size=[])

    def _zero_grad(self) -> None:
        """``optimizer.zero_grad(set_to_none=True)``, written out so that Dynamo traces it.

        Dynamo does not trace ``Optimizer.zero_grad``: the graph broke there, and the frame
        resuming after it held no tensor yet (``self`` and a TensorDict), so Dynamo skipped
        it ("no tensor-related objects found in frame") and the whole step ran eagerly
        around separately compiled pieces (the loss, ``TensorDict.detach``, the optimiser).
        """
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = None

    def _step(self, result: TensorDictBase) -> None:
        """Clip, optimiser step and soft target update (gradients already computed)."""
        if self.max_grad_norm is not None:
            grad_norm = nn.utils.clip_grad_norm_(self._params, self.max_grad_norm)
            result["grad_norm"] = grad_norm.detach()
        self.optimizer.step()
        if self._soft_pairs is not None:
            targets, onlines, tau = self._soft_pairs
            with torch.no_grad():
                torch._foreach_lerp_(targets, [o.detach() for o in onlines], tau)

    def _update_timed(self, tensordict: TensorDictBase) -> TensorDictBase:
        """The eager step with its phases timed apart in ``self.timing``."""
        timing = self.timing
        with timing.add_time("loss"):
            self.optimizer.zero_grad(set_to_none=True)
            out = self.loss_module(tensordict)
            total = _total(out, self.loss_keys)
            result = out.detach()
        with timing.add_time("backward"):
            total.backward()
        with timing.add_time("optimiser"):
            self._step(result)
        return result

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Run one update on ``tensordict``; returns the detached diagnostics."""
        self.calls += 1
        if self.timing is not None:
            out = self._update_timed(tensordict)
        elif not (self._compiling or self._ready_at) or self.calls < self._ready_at:
            out = self._fn(tensordict)  # eager steps and warm-up calls
        else:
            graphs, start = _graph_count(), time.perf_counter()
            out = self._fn(tensordict)
            if self.calls == self._ready_at or _graph_count() != graphs:
                self.compile_seconds += time.perf_counter() - start
            if self.calls > self._ready_at and _graph_count() != graphs:
                self.recompiles += 1
                logger.warning(
                    "update step recompiled (%d so far) at call %d: a guard failed (a new batch "
                    "shape or key set, or a Python float such as a learning rate changed; "
                    "batch keys %s, batch_size %s); TORCH_LOGS=recompiles names the guard",
                    self.recompiles, self.calls, sorted(map(str, tensordict.keys(True, True))),
                    list(tensordict.batch_size))
        if self._eager_updater is not None:
            self._eager_updater.step()
        return self._unpack(out)


def _check(loss_module: Any, optimizer: Any, max_grad_norm: Any, compile: Any,
           cudagraphs: Any) -> dict[str, Any] | None:
    if not isinstance(loss_module, nn.Module):
        raise TypeError(f"loss_module must be an nn.Module, got {type(loss_module).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got "
                        f"{type(optimizer).__name__}")
    if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float))
                                          and max_grad_norm > 0):
        raise ValueError(f"max_grad_norm must be a number > 0 or None, got {max_grad_norm!r}")
    if isinstance(compile, dict):
        unknown = sorted(set(compile) - set(_COMPILE_KEYS))
        if unknown:
            raise ValueError(f"compile: unknown keys {unknown}; expected some of "
                             f"{list(_COMPILE_KEYS)}")
        kwargs = dict(compile)
    elif compile is True:
        kwargs = {}
    elif compile is False:
        kwargs = None
    else:
        raise TypeError(f"compile must be a bool or a dict of torch.compile arguments, "
                        f"got {compile!r}")
    if cudagraphs:
        devices = {p.device.type for g in optimizer.param_groups for p in g["params"]}
        if devices != {"cuda"}:
            raise ValueError(
                "cudagraphs=True needs every optimised parameter on a CUDA device (a CUDA "
                f"graph replays CUDA kernels), got parameters on {sorted(devices)}")
        capturable = all(g.get("capturable", True) or g.get("fused", False)
                         for g in optimizer.param_groups)
        if not capturable:
            raise ValueError("cudagraphs=True needs a capturable optimiser (e.g. "
                             "Adam(..., capturable=True)), got capturable=False")
    return kwargs


def make_update_step(
    loss_module: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    target_updater: Any = None,
    max_grad_norm: float | None = None,
    compile: bool | dict[str, Any] = False,
    cudagraphs: bool = False,
    timing: Any = None,
    loss_keys: Sequence[str] | None = None,
) -> UpdateStep:
    """Build one learner update as a single callable ``batch -> diagnostics``.

    Each call runs ``out = loss_module(batch)``, backpropagates the sum of its ``"loss"``
    and ``"loss_*"`` entries (as TorchRL's trainers sum them; ``loss_keys`` names others),
    clips the gradient norm (optional), steps the optimiser,
    zeroes the gradients and moves the targets. A :class:`SoftUpdate` runs inside the step
    as one ``torch._foreach_lerp_`` (so it is compiled and captured with it); any other
    updater (:class:`HardUpdate`, whose period is a Python counter) runs eagerly after it.

    Rules (the collector's ``compile_policy`` / ``cudagraph_policy`` follow the same):
    with ``compile``, the first ``warmup`` calls (default 1) run eagerly, the next one
    traces and compiles (:attr:`UpdateStep.compile_seconds` times it), and later calls run
    the compiled graph; the parameters are shared, so in-place weight changes need no
    recompilation. A new batch shape or key set recompiles once and logs a warning. A
    learning rate changed as a Python float between calls recompiles; give the optimiser
    a tensor ``lr`` and change it in place. With ``cudagraphs`` (CUDA only) the step is
    wrapped in ``tensordict.nn.CudaGraphModule``: after the compile warm-up and two
    more warm-up calls it is captured and then replayed, so every batch must have the
    same shapes and keys, and the optimiser must be capturable. A CUDA graph cannot
    capture a host synchronisation: no ``.item()`` in the loss, and
    ``torch.distributions``' argument checks (``validate_args``) are turned off around
    the graphed calls.

    Args:
        loss_module: a loss returning a TensorDict with ``"loss"`` / ``"loss_*"`` scalars
            (every loss of this package, and any loss with that contract).
        optimizer: the optimiser over the parameters to update.
        target_updater: a :class:`SoftUpdate`, :class:`HardUpdate` or any object with a
            ``step()`` method, or ``None``.
        max_grad_norm: clip the total gradient norm to this value (and report it as
            ``"grad_norm"``); ``None`` for no clipping.
        compile: ``False``, ``True`` or a dict of ``warmup`` (eager calls before
            compiling) and ``torch.compile`` arguments (``mode``, ``fullgraph``,
            ``backend``, ``dynamic``, ``options``).
        cudagraphs: capture the step in a CUDA graph (parameters on CUDA, capturable
            optimiser).
        timing: an ``rl_profiling.Timing`` (e.g. a ``RunReport``): an eager step then
            times its phases in it as ``"loss"`` (zero grads, loss), ``"backward"`` and
            ``"optimiser"`` (clip, step, soft target update), so a run report splits
            them as a hand-written loop does. Ignored with ``compile`` or ``cudagraphs``:
            one graph has no phases; time the whole call as one.
        loss_keys: the output entries to sum and backpropagate, in place of every
            ``"loss"`` / ``"loss_*"`` one: e.g. ``CQLLoss`` without its
            ``"loss_actor_bc"``, the behaviour-cloning term TorchRL's CQL script trains
            on only for its first steps. Each must be in the output (a ``KeyError``
            naming it otherwise).

    Returns:
        The :class:`UpdateStep`.

    Raises:
        TypeError: ``loss_module``, ``optimizer``, ``compile``, ``timing`` or
            ``loss_keys`` of the wrong type.
        ValueError: an unknown ``compile`` key, a non-positive ``max_grad_norm``, an
            empty ``loss_keys``, or
            ``cudagraphs=True`` with parameters off CUDA or a non-capturable optimiser.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from rl_objectives import DQNLoss
        >>> net = TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])
        >>> loss = DQNLoss(net, action_space="categorical")
        >>> step = make_update_step(loss, torch.optim.Adam(loss.parameters()),
        ...                         compile={"warmup": 2})
        >>> make_update_step(loss, torch.optim.Adam(loss.parameters()), cudagraphs=True)
        Traceback (most recent call last):
        ...
        ValueError: cudagraphs=True needs every optimised parameter on a CUDA device ...
    """
    kwargs = _check(loss_module, optimizer, max_grad_norm, compile, cudagraphs)
    if timing is not None and not callable(getattr(timing, "add_time", None)):
        raise TypeError(f"timing must be an rl_profiling.Timing (with add_time) or None, "
                        f"got {type(timing).__name__}")
    if loss_keys is not None:
        if (isinstance(loss_keys, str) or not isinstance(loss_keys, Sequence)
                or not all(isinstance(k, str) for k in loss_keys)):
            raise TypeError(f"loss_keys: expected a sequence of str (output entries) or None, "
                            f"got {loss_keys!r}")
        loss_keys = tuple(loss_keys)
        if not loss_keys:
            raise ValueError("loss_keys: expected at least one entry to backpropagate, got ()")
    return UpdateStep(loss_module, optimizer, target_updater, max_grad_norm, kwargs,
                      bool(cudagraphs), timing, loss_keys)
