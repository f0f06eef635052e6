"""A plain ``TensorDictModule`` run on its tensors, without tensordict's generic dispatch.

``module(tensordict)`` reads the in-keys, calls ``module.module`` on them and writes the
out-keys; around that, tensordict's ``forward`` handles keyword in-keys, methods, hooks,
``skip_existing``, out-of-place writes and error notes, about 20 us a call on a CPU. When
none of those applies (:func:`is_plain`), :func:`call_plain` runs the same network on the
same tensors and returns what ``forward`` would have written, so a hot path can skip the
machinery and stay equal, output and gradient, to the generic call. A policy built as
nested ``TensorDictSequential`` modules pays that dispatch again for each sequence:
:func:`unrolled` calls its members in order instead (what the collectors run each step).

It lives in rl-envs because rl-modules (its actors) and rl-collectors (the policy a
rollout calls) both depend on rl-envs and not on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, unravel_key
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    TensorDictModule,
    TensorDictSequential,
    skip_existing,
)
from torch.nn.modules import module as _torch_module

__all__ = [
    "build_dist", "call_plain", "is_plain", "plain_sequence_member", "unrolled", "write_outputs",
]

_TDM_FORWARD = TensorDictModule.forward
_TDS_FORWARD = TensorDictSequential.forward
_GET_DIST = ProbabilisticTensorDictModule.get_dist


def _hooked(module: torch.nn.Module) -> bool:
    """Hooks ``module.__call__`` would run (its own or global ones)."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
        or module._backward_pre_hooks or _torch_module._global_forward_hooks
        or _torch_module._global_forward_pre_hooks or _torch_module._global_backward_hooks
        or _torch_module._global_backward_pre_hooks
    )


def is_plain(module: Any, forward: Any = _TDM_FORWARD) -> bool:
    """Whether ``module(td)`` only reads in-keys, calls ``module.module``, writes out-keys.

    That is a ``TensorDictModule`` whose class keeps tensordict's ``forward`` (a
    ``SafeModule``'s spec guard is an override: not plain), with list in-keys, no
    ``method``, in-place writes, no hooks (``select_out_keys`` is one) and
    ``skip_existing`` off.

    Args:
        module: any object.
        forward: the ``forward`` its class must keep: tensordict's by default; a subclass
            whose own ``forward`` wraps tensordict's (rl-modules' ``SafeModule``) passes
            its own to ask whether the wrapped call is plain.

    Returns:
        ``True`` when :func:`call_plain` computes what ``module(td)`` computes.

    Examples:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> m = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> is_plain(m), is_plain(m.select_out_keys("state_value"))
        (True, False)
    """
    return (
        type(module).forward is forward
        and module._kwargs is None and module.method is None and not module.method_kwargs
        and not module._get_kwargs and module.inplace is True and not _hooked(module)
        and not skip_existing()
    )


def plain_sequence_member(sequence: Any) -> TensorDictModule | None:
    """The one plain module of a ``TensorDictSequential`` that runs it in place, else ``None``.

    Args:
        sequence: a ``TensorDictSequential`` (e.g. a probabilistic actor's deterministic
            part).

    Returns:
        Its only module when that is plain (:func:`is_plain`) and the sequence writes into
        its input (no out-key selection, no out-of-place mode, no hooks); ``None`` otherwise.
    """
    if (type(sequence).forward is not _TDS_FORWARD or sequence.inplace not in (None, True)
            or sequence._select_before_return or _hooked(sequence)):
        return None
    modules = sequence._modules["module"]
    if len(modules) != 1:
        return None
    (only,) = modules
    return only if is_plain(only) else None


def call_plain(module: TensorDictModule, tensordict: TensorDictBase) -> tuple | None:
    """Run a plain module's network on its in-key tensors of ``tensordict``.

    Args:
        module: a module for which :func:`is_plain` holds.
        tensordict: the input.

    Returns:
        The outputs, one per ``module.out_keys_source`` entry, as ``forward`` pairs them
        with the keys; ``None`` (nothing run) when an in-key is missing, so that the
        caller's generic call raises tensordict's own error.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> m = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> td = TensorDict(observation=torch.ones(2, 3), batch_size=[2])
        >>> bool((call_plain(m, td)[0] == m(td)["state_value"]).all())
        True
        >>> call_plain(m, TensorDict(batch_size=[2])) is None
        True
    """
    tensors = []
    for key in module.in_keys:
        tensor = tensordict.get(key, None)
        if tensor is None:
            return None
        tensors.append(tensor)
    out = module.module(*tensors)
    if type(out) is torch.Tensor:
        return (out,)
    if out is None:
        return ()
    if type(out) is not tuple and isinstance(out, (dict, TensorDictBase)):
        if isinstance(out, dict):
            out = {unravel_key(k): v for k, v in out.items()}
        if all(key in out for key in module.out_keys_source):
            return tuple(out.get(key) for key in module.out_keys_source)
    return out if isinstance(out, tuple) else (out,)


def write_outputs(module: TensorDictModule, tensordict: TensorDictBase, outputs: tuple) -> None:
    """Write :func:`call_plain`'s ``outputs`` into ``tensordict`` as ``forward`` does.

    Args:
        module: the plain module that computed them.
        tensordict: where to write (in place).
        outputs: the outputs.

    Raises:
        RuntimeError: the number of outputs is not the number of out-keys (tensordict's
            message).
    """
    keys = module.out_keys_source
    if len(outputs) > len(keys):
        raise RuntimeError(f"There are more tensors ({len(outputs)=}) than out_keys ({keys=}).")
    if len(keys) > len(outputs):
        raise RuntimeError("There are more out_keys than tensors.")
    for key, tensor in zip(keys, outputs, strict=True):
        if key != "_":
            tensordict.set(key, tensor if type(tensor) is torch.Tensor
                           else TensorDict.from_any(tensor))


def build_dist(prob: ProbabilisticTensorDictModule, tensordict: TensorDictBase) -> Any:
    """``prob.get_dist(tensordict)``, built directly when ``prob`` keeps tensordict's method.

    Args:
        prob: the distribution module.
        tensordict: holds the distribution's parameters at ``prob.in_keys``.

    Returns:
        ``prob.distribution_class(**parameters, **prob.distribution_kwargs)``; where that
        raises a ``TypeError`` (a keyword the class does not take) or a parameter is
        missing, tensordict's ``get_dist`` runs and raises its own error.
    """
    if type(prob).get_dist is not _GET_DIST:
        return prob.get_dist(tensordict)
    params = {}
    for dist_key, key in zip(prob.dist_keys, prob.in_keys, strict=True):
        params[dist_key[-1] if isinstance(dist_key, tuple) else dist_key] = tensordict.get(
            key, None)
    try:
        return prob.distribution_class(**params, **prob.distribution_kwargs)
    except TypeError:
        return prob.get_dist(tensordict)


def unrolled(policy: Any) -> Callable[[TensorDictBase], TensorDictBase]:
    """``policy``, a ``TensorDictSequential`` (nested ones included), called member by member.

    A sequence with tensordict's own ``forward`` that writes in place (``inplace`` ``None``
    or ``True``, no out-key selection, not ``partial_tolerant``) calls its members in order
    on the tensordict each returns; the callable returned does the same without the
    sequences' dispatch (about 10 us a sequence on a CPU), and runs a plain member
    (:func:`is_plain`) on its tensors (:func:`call_plain`). The same modules run in the
    same order on the same tensors: outputs and gradients equal the generic call's. A hook
    on a sequence, a member swapped or an option changed since, or ``skip_existing``
    (checked on every call) sends the call to ``policy(td)``. A member that is not such a
    sequence (any other module, a subclass with its own ``forward``) is called as the
    sequence calls it.

    Args:
        policy: any callable.

    Returns:
        The unrolled call, or ``policy`` itself when it is not such a sequence.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> seq = TensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["hidden"]),
        ...     TensorDictModule(torch.nn.Tanh(), ["hidden"], ["action"]))
        >>> td = TensorDict(observation=torch.ones(4, 3), batch_size=[4])
        >>> bool((unrolled(seq)(td.clone())["action"] == seq(td.clone())["action"]).all())
        True
        >>> unrolled(seq[0]) is seq[0]
        True
    """
    sequences: list = []
    members: list = []
    if not _unroll(policy, sequences, members) or not sequences:
        return policy
    layout = [(seq, tuple(seq._module_iter())) for seq in sequences]

    def forward(tensordict: TensorDictBase) -> TensorDictBase:
        if skip_existing() or not all(_unchanged(seq, mods) for seq, mods in layout):
            return policy(tensordict)
        for member in members:
            if is_plain(member):
                outputs = call_plain(member, tensordict)
                if outputs is not None:
                    write_outputs(member, tensordict, outputs)
                    continue
            tensordict = member(tensordict)
        return tensordict

    return forward


def _unchanged(sequence: Any, modules: tuple) -> bool:
    """Whether ``sequence`` still runs as when it was unrolled: no hook, the same modules
    (a member swapped since is called by the sequence itself), the same options."""
    return (not _hooked(sequence) and tuple(sequence._module_iter()) == modules
            and _writes_in_place(sequence))


def _writes_in_place(sequence: Any) -> bool:
    """Whether ``sequence`` calls its members on the tensordict each returns and returns
    the last one: ``inplace`` ``None`` or ``True``, no out-key selection, not
    ``partial_tolerant``."""
    return (sequence.inplace in (None, True) and not sequence._select_before_return
            and not sequence.partial_tolerant)


def _unroll(module: Any, sequences: list, members: list) -> bool:
    """Append ``module``'s members (itself if it is not an unrollable sequence) and its
    sequences; ``False`` when one of its sequences cannot be unrolled."""
    if not isinstance(module, TensorDictSequential) or type(module).forward is not _TDS_FORWARD:
        members.append(module)
        return True
    if not _writes_in_place(module):
        return False
    sequences.append(module)
    return all(_unroll(m, sequences, members) for m in module._module_iter())
