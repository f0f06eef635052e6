"""Independent copies of a tensordict module, stacked and evaluated in one vmapped call."""

from __future__ import annotations

import copy

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModuleBase, TensorDictParams
from torch import nn

__all__ = ["StackedCritics", "stack_copies", "vmap_call"]


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

    The copies run one after the other through ``torch.func.functional_call`` on views of
    the stacked leaves (no ``torch.vmap``): each copy is then plain GEMMs, as a
    hand-written ensemble, which costs less than vmap's batched matmuls in eager mode and
    compiles into one graph without the size-1 ``bmm`` lowering Inductor turns into slow
    reductions on the CPU (measured in ``benchmarks/bench_update.py``'s SAC row). Each copy
    draws its own randomness, as ``vmap(randomness="different")`` did.

    Args:
        module: the module whose parameters ``params`` replaces during the call.
        params: stacked parameters (batch size ``[N]``), e.g. from :func:`stack_copies`
            or a detached / target copy of them.
        tensordict: the input, shared by the ``N`` calls (not written to).

    Returns:
        The outputs, with a leading dim ``N``.
    """
    leaves = [(k if isinstance(k, str) else ".".join(k), params.get(k))
              for k in params.keys(include_nested=True, leaves_only=True)]
    outs = [
        torch.func.functional_call(
            module, {name: leaf[i] for name, leaf in leaves}, (tensordict.copy(),))
        for i in range(params.batch_size[0])
    ]
    return torch.stack(outs, 0)


class StackedCritics:
    """Critics as one template module (``_qvalue_template``) run with stacked parameters.

    A mixin for losses (before ``LossModule`` in the bases): they keep the template in
    ``_qvalue_template`` and its copies' parameters from :func:`stack_copies`.
    """

    @property
    def qvalue_network(self) -> TensorDictModuleBase:
        """The critic template; its parameters are swapped for ``qvalue_network_params``."""
        return self._qvalue_template

    def _qvalues(self, tensordict: TensorDictBase, action: torch.Tensor, params) -> torch.Tensor:
        """``Q_i(s, action)`` for every critic, shape ``[N, *B]``."""
        template = self._qvalue_template
        td = tensordict.select(*template.in_keys, strict=False)
        td.set(self.tensor_keys.action, action)
        value = self._get(vmap_call(template, params, td), self.tensor_keys.state_action_value)
        return value.reshape(value.shape[0], *tensordict.batch_size)
