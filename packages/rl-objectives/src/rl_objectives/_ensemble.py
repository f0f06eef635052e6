"""Independent copies of a tensordict module, stacked and evaluated in one vmapped call."""

from __future__ import annotations

import copy
import weakref
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase, unravel_key
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictParams, skip_existing
from torch import nn
from torch.nn.modules import module as _torch_module

__all__ = ["StackedCritics", "plain_network", "stack_copies", "stacked_calls", "swap_call",
           "vmap_call"]

_TDM_FORWARD = TensorDictModule.forward


def _reset_parameters(module: nn.Module) -> None:
    """Re-draw the parameters of every submodule that has ``reset_parameters``."""
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if sub is not module and callable(reset):
            reset()


def stack_copies(module: TensorDictModuleBase, num_copies: int) -> TensorDictParams:
    """Parameters and buffers of ``num_copies`` copies of ``module``, stacked on dim 0.

    Copy 0 starts from ``module``'s own values; the others are re-initialised with each
    submodule's ``reset_parameters`` (as TorchRL does), so that clipped double-Q learning
    starts from distinct critics. ``module`` itself is left untouched.

    Args:
        module: the tensordict module to copy.
        num_copies: how many copies (``>= 1``).

    Returns:
        A ``TensorDictParams`` with batch size ``[num_copies]``.
    """
    copies = [module] + [copy.deepcopy(module) for _ in range(num_copies - 1)]
    for extra in copies[1:]:
        _reset_parameters(extra)
    return TensorDict.from_modules(*copies, as_module=True)


def vmap_call(
    module: TensorDictModuleBase, params: TensorDictBase, tensordict: TensorDictBase
) -> TensorDictBase:
    """Run ``module`` once per entry of the stacked ``params`` on the same input.

    The copies run one after the other on views of the stacked leaves (no ``torch.vmap``):
    each copy is then plain GEMMs, as a hand-written ensemble, which costs less than vmap's
    batched matmuls in eager mode and compiles into one graph without the size-1 ``bmm``
    lowering Inductor turns into slow reductions on the CPU (measured in
    ``benchmarks/bench_update.py``'s SAC row). Under ``torch.compile`` each copy goes
    through ``torch.func.functional_call`` (which Dynamo traces); eager, through
    :func:`swap_call`, the same call without ``functional_call``'s walk over the module
    tree (at 128x128 critics that walk cost more than the critics' GEMMs). Each copy
    draws its own randomness, as ``vmap(randomness="different")`` did.

    Args:
        module: the module whose parameters ``params`` replaces during the call.
        params: stacked parameters (batch size ``[N]``), e.g. from :func:`stack_copies`
            or a detached / target copy of them.
        tensordict: the input, shared by the ``N`` calls (not written to).

    Returns:
        The outputs, with a leading dim ``N``: the module's ``out_keys`` only (its inputs
        are not stacked ``N`` times).

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> net = TensorDictModule(nn.Linear(3, 1), ["x"], ["q"])
        >>> params = stack_copies(net, 2)
        >>> out = vmap_call(net, params, TensorDict(x=torch.ones(5, 3), batch_size=[5]))
        >>> out["q"].shape
        torch.Size([2, 5, 1])
    """
    names, members = _members(params)
    call = torch.func.functional_call if torch.compiler.is_compiling() else swap_call
    outs = [call(module, dict(zip(names, member, strict=True)), (tensordict.copy(),))
            for member in members]
    keys = getattr(module, "out_keys", None)
    if not keys:
        return torch.stack(outs, 0)
    return TensorDict({key: torch.stack([out.get(key) for out in outs], 0) for key in keys},
                      batch_size=[len(outs), *tensordict.batch_size])


def _members(params: TensorDictBase) -> tuple[list[str], list[tuple[torch.Tensor, ...]]]:
    """The dotted names of the stacked leaves and, per copy, its views of them.

    A ``TensorDictParams`` is read through the TensorDict it wraps (``_param_td``, the
    same leaves): its own methods each go through a wrapper that costs more than the
    critics' GEMMs at small sizes (65 against 17 us for a 3-layer critic's six leaves).
    """
    inner = getattr(params, "_param_td", params)
    names, stacked = [], []
    for key, leaf in inner.items(include_nested=True, leaves_only=True):
        names.append(key if isinstance(key, str) else ".".join(key))
        stacked.append(leaf)
    return names, list(zip(*(leaf.unbind(0) for leaf in stacked), strict=True))


def plain_network(module: Any) -> nn.Module | None:
    """``module.module`` when ``module(td)`` only reads its in-keys, calls that network on
    them and writes its out-keys: tensordict's own ``TensorDictModule.forward`` (not an
    override), no ``method`` or keyword in-keys, in place, no hooks, ``skip_existing`` off.
    The check rl-modules makes for its actors (``rl_envs._direct.is_plain``), here for
    the critics (rl-objectives does not import rl-modules). ``None`` otherwise.

    Examples:
        >>> from tensordict.nn import TensorDictModule
        >>> critic = TensorDictModule(nn.Linear(3, 1), ["observation"], ["state_value"])
        >>> plain_network(critic) is critic.module
        True
    """
    if (type(module).forward is not _TDM_FORWARD or module._kwargs is not None
            or module.method is not None or module.method_kwargs or module._get_kwargs
            or module.inplace is not True or skip_existing()):
        return None
    hooked = (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
              or module._backward_pre_hooks or _torch_module._global_forward_hooks
              or _torch_module._global_forward_pre_hooks
              or _torch_module._global_backward_hooks
              or _torch_module._global_backward_pre_hooks)
    return None if hooked else module.module


def stacked_calls(module: nn.Module, params: TensorDictBase, network: nn.Module,
                  args: list[torch.Tensor], count: int | None = None) -> torch.Tensor | None:
    """``network(*args)`` once per copy of the stacked ``params`` of ``module`` (``network``
    one of its submodules), stacked on a new dim 0: :func:`vmap_call` on tensors, without a
    TensorDict built around each call (eager only); ``count``: the first ``count`` copies
    only (``params[:count]``'s calls, without slicing the TensorDict). ``None`` (nothing
    returned) when ``module`` has tied tensors or ``network`` does not return one tensor."""
    if _has_ties(module):
        return None
    names, members = _members(params)
    outs = [swap_call(module, dict(zip(names, member, strict=True)), args, call=network)
            for member in members[:count]]
    if any(type(out) is not torch.Tensor for out in outs):
        return None
    return torch.stack(outs, 0)


_TIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _has_ties(module: nn.Module) -> bool:
    """Whether one tensor is registered under two names in ``module`` (checked once)."""
    ties = _TIES.get(module)
    if ties is None:
        names = [name for name, _ in module.named_parameters(remove_duplicate=False)]
        names += [name for name, _ in module.named_buffers(remove_duplicate=False)]
        unique = len(dict(module.named_parameters())) + len(dict(module.named_buffers()))
        ties = _TIES[module] = len(names) != unique
    return ties


def swap_call(module: nn.Module, tensors: dict[str, torch.Tensor], args: tuple | list,
              call: nn.Module | None = None) -> object:
    """``module(*args)`` (or ``call(*args)``, ``call`` a submodule of ``module``) with the
    named parameters / buffers of ``module`` replaced by ``tensors``.

    ``torch.func.functional_call``'s result for a module without tied or parametrised
    tensors, at a fraction of its cost: each named tensor is put in its owner's
    ``_parameters`` / ``_buffers`` slot for the call and the original put back after it,
    even when the call raises. A module with tied tensors (one tensor under two names),
    or a name that is neither a parameter nor a buffer of its owner, sends the whole call
    to ``functional_call``.

    Args:
        module: the module to call.
        tensors: dotted name (as ``named_parameters`` gives it) -> the tensor to use.
        args: the positional arguments of the call.

    Returns:
        What ``module(*args)`` returns.

    Examples:
        >>> lin = nn.Linear(2, 1)
        >>> w = {"weight": torch.ones(1, 2), "bias": torch.zeros(1)}
        >>> swap_call(lin, w, (torch.ones(1, 2),)).tolist(), lin.weight.shape
        ([[2.0]], torch.Size([1, 2]))
    """
    if _has_ties(module):
        return torch.func.functional_call(module, tensors, args)
    slots = []
    for name, tensor in tensors.items():
        *path, attr = name.split(".")
        owner = module
        for part in path:  # `get_submodule` without its checks: plain dict lookups
            owner = owner._modules[part]
        table = owner._parameters if attr in owner._parameters else owner._buffers
        if attr not in table:
            return torch.func.functional_call(module, tensors, args)
        slots.append((table, attr, tensor))
    saved = [(table, attr, table[attr]) for table, attr, _ in slots]
    try:
        for table, attr, tensor in slots:
            table[attr] = tensor
        return (module if call is None else call)(*args)
    finally:
        for table, attr, old in saved:
            table[attr] = old


class StackedCritics:
    """Critics as one template module (``_qvalue_template``) run with stacked parameters.

    A mixin for losses (before ``LossModule`` in the bases): they keep the template in
    ``_qvalue_template`` and its copies' parameters from :func:`stack_copies`.
    """

    @property
    def qvalue_network(self) -> TensorDictModuleBase:
        """The critic template; its parameters are swapped for ``qvalue_network_params``."""
        return self._qvalue_template

    def _qvalues(self, tensordict: TensorDictBase, action: torch.Tensor, params,
                 count: int | None = None) -> torch.Tensor:
        """``Q_i(s, action)`` for every critic (the first ``count`` of them: ``params[:count]``
        without slicing the TensorDict, which costs more than a small critic), ``[N, *B]``."""
        template = self._qvalue_template
        value = None if torch.compiler.is_compiling() else self._plain_qvalues(
            template, tensordict, action, params, count)
        if value is None:  # a critic that is not plain, or compiling: tensordict's call
            td = tensordict.select(*template.in_keys, strict=False)
            td.set(self.tensor_keys.action, action)
            value = self._get(vmap_call(template, params if count is None else params[:count],
                                        td), self.tensor_keys.state_action_value)
        return value.reshape(value.shape[0], *tensordict.batch_size)

    def _plain_qvalues(self, template: Any, tensordict: TensorDictBase, action: torch.Tensor,
                       params: TensorDictBase, count: int | None = None) -> torch.Tensor | None:
        """The stacked critics' values ``[N, *B, 1]`` computed on tensors, when the
        template is plain (:func:`plain_network`) with the one out-key the loss reads:
        the same calls on the same tensors as ``vmap_call`` (same values and gradients),
        without the TensorDicts around them (their cost is a large share of a small
        critic's step on a CPU); ``None`` otherwise."""
        network = plain_network(template)
        out_key = unravel_key(self.tensor_keys.state_action_value)
        if network is None or [unravel_key(k) for k in template.out_keys] != [out_key]:
            return None
        action_key = unravel_key(self.tensor_keys.action)
        args = [action if unravel_key(k) == action_key else tensordict.get(k, None)
                for k in template.in_keys]
        if any(a is None for a in args):
            return None
        return stacked_calls(template, params, network, args, count)
