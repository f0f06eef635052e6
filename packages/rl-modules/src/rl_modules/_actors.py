"""Actors and critics as ``tensordict.nn`` modules (TorchRL names and meaning):
``SafeModule``, ``Actor``, ``ProbabilisticActor`` and ``ValueOperator``.

Each is a ``TensorDictModule`` / ``ProbabilisticTensorDictSequential`` with a
``SpecGuard`` on its output: given the env's spec, the first outputs are checked against it
(``safe=False``) or every output is projected into it (``safe=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import Bounded, Composite
from rl_envs._direct import (
    build_dist,
    call_plain,
    is_plain,
    plain_sequence_member,
    write_outputs,
)
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    interaction_type,
    set_interaction_type,
)

from rl_modules._distributions_continuous import IndependentNormal, TanhNormal, TruncatedNormal
from rl_modules._spec_guard import SpecGuard, event_spec

__all__ = ["Actor", "ProbabilisticActor", "SafeModule", "ValueOperator"]

ACTION = "action"
SAMPLE_LOG_PROB = "sample_log_prob"  # the key rl-objectives' losses read


class SafeModule(TensorDictModule):
    """A ``TensorDictModule`` that knows the spec of what it writes.

    Args:
        module: the callable (usually an ``nn.Module``) mapping the in-key tensors to the
            out-key tensors.
        in_keys: keys read.
        out_keys: keys written.
        spec: a leaf spec of the first out key, or a ``Composite`` keyed by out keys (an
            env's batched spec is fine: the batch dims are dropped).
        safe: project every output into the spec; otherwise only the first outputs are
            checked (``ActionSpecError`` names the key, expected and received value).
        **kwargs: passed to ``TensorDictModule``.

    Examples:
        >>> import torch
        >>> from rl_envs import Bounded
        >>> from tensordict import TensorDict
        >>> m = SafeModule(torch.nn.Linear(3, 2), ["observation"], ["action"],
        ...                spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
        >>> out = m(TensorDict(observation=100 * torch.ones(4, 3), batch_size=[4]))
        >>> bool((out["action"].abs() <= 1).all())
        True
    """

    def __init__(
        self,
        module: Any,
        in_keys: Any,
        out_keys: Any,
        *,
        spec: Any = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(module, in_keys, out_keys, **kwargs)
        self._guard = SpecGuard(spec, self.out_keys, safe)

    @property
    def spec(self) -> dict[Any, Any]:
        """``{out_key: spec of one value}``."""
        return self._guard.specs

    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        # A plain call (rl_envs._direct.is_plain: list in-keys, in place, no method,
        # hooks or skip_existing) runs the network on its tensors, as tensordict's forward
        # would, without its dispatch (about 15 us of an actor's call on a CPU).
        outputs = None
        if not args and not kwargs and isinstance(tensordict, TensorDictBase) and is_plain(
                self, _SAFE_FORWARD):
            outputs = call_plain(self, tensordict)
        if outputs is None:
            out = super().forward(tensordict, *args, **kwargs)
        else:
            write_outputs(self, tensordict, outputs)
            out = tensordict
        return self._guard(out) if self._guard.active else out


_SAFE_FORWARD = SafeModule.forward


class Actor(SafeModule):
    """A deterministic policy: ``module(observation) -> action``.

    Args:
        module: the network.
        in_keys: keys read (default ``["observation"]``).
        out_keys: keys written (default ``["action"]``).
        spec: the action spec (see ``SafeModule``).
        safe: project every action into the spec.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> actor = Actor(torch.nn.Linear(3, 2))
        >>> actor(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))["action"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        module: Any,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        in_keys = ["observation"] if in_keys is None else in_keys
        out_keys = [ACTION] if out_keys is None else out_keys
        super().__init__(module, in_keys, out_keys, spec=spec, safe=safe, **kwargs)


class ValueOperator(TensorDictModule):
    """A critic: ``module(observation[, action]) -> state_value`` (or ``state_action_value``
    when ``action`` is among the in keys), as TorchRL's.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> v = ValueOperator(torch.nn.Linear(3, 1))
        >>> v(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))["state_value"].shape
        torch.Size([5, 1])
        >>> ValueOperator(torch.nn.Linear(4, 1), in_keys=["observation", "action"]).out_keys
        ['state_action_value']
    """

    def __init__(
        self,
        module: Any,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        in_keys = ["observation"] if in_keys is None else list(in_keys)
        if out_keys is None:
            out_keys = ["state_action_value"] if ACTION in in_keys else ["state_value"]
        super().__init__(module, in_keys, out_keys)


def _resolve_dist_kwargs(dist_class: Any, kwargs: dict, spec: Any) -> dict:
    """``low``/``high`` of a bounded distribution taken from a ``Bounded`` action spec
    when the user gave neither."""
    if dist_class not in (TanhNormal, TruncatedNormal) or spec is None:
        return kwargs
    leaf = spec[ACTION] if isinstance(spec, Composite) and ACTION in spec else spec
    if not isinstance(leaf, Bounded) or "low" in kwargs or "high" in kwargs:
        return kwargs
    one = event_spec(leaf)
    low, high = one.low, one.high
    if bool((low == low.flatten()[0]).all() and (high == high.flatten()[0]).all()):
        low, high = (
            float(low.flatten()[0]),
            float(high.flatten()[0]),
        )  # floats: no tensor op per call
    return {**kwargs, "low": low, "high": high}


def _draws_alone(dist_class: Any) -> bool:
    """Whether tensordict samples ``dist_class`` under ``RANDOM`` as ``_sample`` does: a
    class (not a factory function), not composite, without the joint
    ``(r)sample_and_log_prob`` that tensordict would call instead."""
    return (
        isinstance(dist_class, type)
        and not issubclass(dist_class, CompositeDistribution)
        and not any(hasattr(dist_class, f"{m}_and_log_prob") for m in ("sample", "rsample"))
    )


def _normal_keys(prob: ProbabilisticTensorDictModule) -> tuple[Any, Any] | None:
    """``(loc key, scale key)`` when ``prob`` draws an ``IndependentNormal`` with its
    defaults (``IndependentNormal.draw``'s case), else ``None``."""
    if prob.distribution_class is not IndependentNormal or prob.distribution_kwargs:
        return None
    names = [k[-1] if isinstance(k, tuple) else k for k in prob.dist_keys]
    if sorted(names) != ["loc", "scale"]:
        return None
    by_name = dict(zip(names, prob.in_keys, strict=True))
    return by_name["loc"], by_name["scale"]


class ProbabilisticActor(ProbabilisticTensorDictSequential):
    """A stochastic policy: a network writes a distribution's parameters, the distribution
    writes the action (and its log-prob).

    ``module`` writes ``in_keys`` (e.g. ``["loc", "scale"]``); a
    ``ProbabilisticTensorDictModule`` builds ``distribution_class`` from them and writes
    ``out_keys`` by the current exploration type (``RANDOM``: a sample;
    ``DETERMINISTIC``: the distribution's ``deterministic_sample``). The losses of
    rl-objectives call its ``get_dist``.

    Spec-aware: with ``spec`` (the env's action spec, batched or not), a ``TanhNormal`` or
    ``TruncatedNormal`` takes its ``low``/``high`` from a ``Bounded`` spec unless given;
    the first actions are checked against the spec (``safe=False``: a wrong distribution or
    wrong bounds raise ``ActionSpecError`` at once), or every action is projected into it
    (``safe=True``; the log-prob stays that of the unprojected sample, as in TorchRL).

    Args:
        module: a ``TensorDictModuleBase`` writing the distribution's parameters.
        in_keys: the distribution's parameter keys (list, or a dict
            ``{kwarg: key}``, e.g. ``{"logits": "logits", "mask": "action_mask"}``).
        out_keys: keys of the sample (default ``["action"]``).
        spec: the action spec (leaf or ``Composite``).
        safe: project every action into ``spec``.
        **kwargs: passed to ``ProbabilisticTensorDictModule`` (``distribution_class``,
            ``distribution_kwargs``, ``return_log_prob``, ``default_interaction_type``,
            ...). ``log_prob_key`` defaults to ``"sample_log_prob"``, the key the losses
            read.

    Raises:
        TypeError: ``module`` is not a tensordict module.

    Examples:
        >>> import torch
        >>> from rl_envs import Bounded
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(net, ["observation"], ["loc", "scale"]), ["loc", "scale"],
        ...     spec=Bounded(-2.0, 2.0, shape=(8, 2)), distribution_class=TanhNormal,
        ...     return_log_prob=True)
        >>> td = actor(TensorDict(observation=torch.randn(8, 3), batch_size=[8]))
        >>> td["action"].shape, td["sample_log_prob"].shape
        (torch.Size([8, 2]), torch.Size([8]))
    """

    def __init__(
        self,
        module: TensorDictModuleBase,
        in_keys: Any,
        out_keys: Sequence[Any] | None = None,
        *,
        spec: Any = None,
        safe: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(module, TensorDictModuleBase):
            raise TypeError(
                f"module: expected a tensordict.nn module writing {in_keys}, received "
                f"{type(module).__name__} (wrap it: TensorDictModule(net, in_keys, out_keys))"
            )
        out_keys = [ACTION] if out_keys is None else list(out_keys)
        if kwargs.get("return_log_prob") and "log_prob_keys" not in kwargs:
            kwargs.setdefault("log_prob_key", SAMPLE_LOG_PROB)
        dist_kwargs = kwargs.get("distribution_kwargs") or {}
        kwargs["distribution_kwargs"] = _resolve_dist_kwargs(
            kwargs.get("distribution_class"), dict(dist_kwargs), spec
        )
        prob = ProbabilisticTensorDictModule(in_keys, out_keys, **kwargs)
        super().__init__(module, prob)
        self._guard = SpecGuard(spec, out_keys, safe)
        # the collector's path (exploration on, one sample, no generator) skips the
        # generic machinery of ProbabilisticTensorDictModule.forward; anything else uses it
        self._sample_key = out_keys[0]
        self._lean = (len(out_keys) == 1 and prob.num_samples is None
                      and kwargs.get("generator") is None
                      and _draws_alone(prob.distribution_class))
        self._normal_keys = _normal_keys(prob) if self._lean else None

    @property
    def spec(self) -> dict[Any, Any]:
        """``{out_key: spec of one value}``."""
        return self._guard.specs

    def _last_prob(self) -> ProbabilisticTensorDictModule | None:
        """The module ``build_dist_from_params`` builds from, when it is the last of
        ``self.module`` and has no submodules (then it is the last
        ``ProbabilisticTensorDictModule`` of ``self.modules()``, which tensordict walks
        on every call); otherwise ``None``."""
        *_, last = None, *self._modules["module"]  # iterating: cheaper than self.module[-1]
        if last is self.__dict__.get("_leaf_prob"):  # checked on an earlier call
            return last
        if isinstance(last, ProbabilisticTensorDictModule) and next(last.children(), None) is None:
            self.__dict__["_leaf_prob"] = last
            return last
        return None

    def build_dist_from_params(self, tensordict: TensorDictBase) -> Any:
        """``ProbabilisticTensorDictSequential.build_dist_from_params`` without the walk
        over every submodule when the last module is the distribution's."""
        prob = self._last_prob()
        if prob is None:
            return super().build_dist_from_params(tensordict)
        return prob.get_dist(tensordict)

    def get_dist(
        self, tensordict: TensorDictBase, tensordict_out: TensorDictBase | None = None,
        **kwargs: Any,
    ) -> Any:
        """The distribution under the current parameters, as tensordict's ``get_dist``
        (the networks run under the current interaction type, else the distribution
        module's default, and write into ``tensordict``), on a shorter path for the
        losses' call: one distribution module last, no ``tensordict_out``, no kwargs;
        and when the network is one plain ``TensorDictModule`` (no hooks, no method, in
        place: ``rl_envs._direct.is_plain``), it is called on its tensors directly,
        without tensordict's dispatch (same outputs, writes and gradients)."""
        prob = self._last_prob()
        det = self._det_part
        if (prob is None or det is None or self.return_composite or kwargs
                or tensordict_out is not None):
            return super().get_dist(tensordict, tensordict_out, **kwargs)
        kind = interaction_type()
        net = plain_sequence_member(det)
        with set_interaction_type(prob.default_interaction_type if kind is None else kind):
            outputs = None if net is None else call_plain(net, tensordict)
            if outputs is None:  # not plain, or an input missing: tensordict's call
                return prob.get_dist(det(tensordict))
        write_outputs(net, tensordict, outputs)  # the writes det(tensordict) makes
        return build_dist(prob, tensordict)

    @profiled("ProbabilisticActor.forward")
    def forward(self, tensordict: TensorDictBase, *args: Any, **kwargs: Any) -> TensorDictBase:
        *nets, prob = self.module  # iterating: slicing a ModuleList builds a new one
        if self._lean and not args and not kwargs and (
            (interaction_type() or prob.default_interaction_type) is InteractionType.RANDOM
        ):
            out = self._sample(tensordict, nets, prob)
        else:
            out = super().forward(tensordict, *args, **kwargs)
        return self._guard(out) if self._guard.active else out

    def _sample(
        self,
        tensordict: TensorDictBase,
        nets: list[TensorDictModuleBase],
        prob: ProbabilisticTensorDictModule,
    ) -> TensorDictBase:
        """What ``ProbabilisticTensorDictModule`` does under ``RANDOM`` for one sample:
        a (reparameterised where possible) draw, and its log-prob when asked. A plain
        network (``rl_envs._direct.is_plain``) runs on its tensors directly and the
        distribution is built directly, as in :meth:`get_dist` (the same writes)."""
        for module in nets:
            outputs = call_plain(module, tensordict) if is_plain(module) else None
            if outputs is None:
                tensordict = module(tensordict)
            else:
                write_outputs(module, tensordict, outputs)
        keys = self._normal_keys
        if keys is not None and not torch.is_grad_enabled():  # IndependentNormal, defaults
            loc, scale = tensordict.get(keys[0], None), tensordict.get(keys[1], None)
            if loc is not None and scale is not None and scale.shape == loc.shape:
                value, log_prob = IndependentNormal.draw(loc, scale)  # no distribution built
                tensordict.set(self._sample_key, value)
                if prob.return_log_prob:
                    tensordict.set(prob.log_prob_key, log_prob)
                return tensordict
        dist = build_dist(prob, tensordict)
        value = dist.rsample() if dist.has_rsample else dist.sample()
        tensordict.set(self._sample_key, value)
        if prob.return_log_prob:
            tensordict.set(prob.log_prob_key, dist.log_prob(value))
        return tensordict
