"""LSTMModule and GRUModule: TensorDict modules with a correct hidden-state lifecycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict.utils import NestedKey
from torch import nn

from rl_recurrent._base import RecurrentModuleBase, resolve_keys
from rl_recurrent._keys import GRU_STATE, LSTM_STATE_C, LSTM_STATE_H

__all__ = ["GRUModule", "LSTMModule"]


def _check_sizes(input_size: int, hidden_size: int, num_layers: int, dropout: float) -> None:
    for name, value in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


TORCHRL_ONLY = {
    "batch_first": "inputs are always batch-first ([*B, T, F])",
    "bidirectional": "policies run forward in time only",
}
"""TorchRL recurrent-module arguments with no counterpart here, and what to do instead."""


def python_based_backend(owner: str, python_based: Any, backend: str) -> str:
    """TorchRL's ``python_based=True`` (its LSTM / GRU cell stepped in Python over time, no
    cuDNN) is the ``"scan"`` backend here: the same math in torch ops, chunked over time;
    ``False`` leaves ``backend`` as it is."""
    if not isinstance(python_based, bool):
        raise TypeError(f"{owner}: python_based: expected a bool, received {python_based!r}")
    if not python_based:
        return backend
    if backend not in ("auto", "scan"):
        raise ValueError(
            f"{owner}: python_based=True is recurrent_backend='scan' here, received "
            f"recurrent_backend={backend!r} too: pass one of them"
        )
    return "scan"


def refuse_torchrl_only(owner: str, kwargs: dict[str, Any]) -> None:
    """A TorchRL argument names what to use instead; any other unknown keyword is a typo."""
    for name in kwargs:
        reason = TORCHRL_ONLY.get(name)
        raise TypeError(f"{name}: TorchRL's argument is not supported here; {reason}" if reason
                        else f"{owner}: got an unexpected keyword argument {name!r}")


class _TorchRNNModule(RecurrentModuleBase):
    """The constructor :class:`LSTMModule` and :class:`GRUModule` share.

    A subclass names the torch module to wrap (``_rnn_class``), the attribute that holds it
    (``_rnn_attribute``, hence its ``state_dict`` prefix) and its default state keys
    (``_default_state_keys``); the arguments are documented on the subclasses.
    """

    _rnn_class: type[nn.LSTM] | type[nn.GRU]
    _rnn_attribute: str
    _default_state_keys: tuple[str, ...]

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        *,
        in_key: NestedKey | None = None,
        in_keys: Sequence[NestedKey] | None = None,
        out_key: NestedKey | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        device: torch.device | str | None = None,
        recurrent_backend: str = "auto",
        recurrent_recompute: str = "none",
        recurrent_compute_dtype: torch.dtype | None = None,
        recurrent_matmul_precision: str | None = None,
        **torchrl_only: Any,
    ) -> None:
        super().__init__()
        if "python_based" in torchrl_only:
            recurrent_backend = python_based_backend(
                type(self).__name__, torchrl_only.pop("python_based"), recurrent_backend
            )
        refuse_torchrl_only(type(self).__name__, torchrl_only)
        _check_sizes(input_size, hidden_size, num_layers, dropout)
        keys = resolve_keys(in_key, in_keys, out_key, out_keys, self._default_state_keys)
        rnn = self._rnn_class(
            input_size, hidden_size, num_layers, bias=bias, batch_first=True,
            dropout=dropout, device=device,
        )  # fmt: skip
        setattr(self, self._rnn_attribute, rnn)
        self._setup(
            rnn, *keys, recurrent_backend, recurrent_recompute,
            recurrent_compute_dtype, recurrent_matmul_precision,
        )  # fmt: skip


class LSTMModule(_TorchRNNModule):
    """An ``nn.LSTM`` as a TensorDict module, in sequential or recurrent mode.

    Sequential mode (the default; a collector calls the policy one step at a time): reads
    ``in_keys = [input, h, c]`` and ``"is_init"`` from a tensordict of batch ``[*B]``,
    zeros the states where ``is_init`` is true (a missing state is allowed only there),
    runs one step and writes the output and the next states under ``("next", h)`` and
    ``("next", c)``. States have shape ``[*B, num_layers, hidden_size]``.

    Recurrent mode (inside :class:`~rl_recurrent.set_recurrent_mode` ``(True)``; training
    on ``[*B, T]`` batches, time last): takes the stored states at ``t = 0`` as the
    initial state (zeroed where ``is_init[..., 0]``), zeros the state again before every
    step where ``is_init`` is true, and writes the output at every step. The next states
    are exact at the last step of each trajectory segment (``t = T - 1`` and every step
    followed by ``is_init``) and zero elsewhere.

    Args:
        input_size: features of the input entry (its last dim).
        hidden_size: features of ``h`` and ``c``.
        num_layers: stacked LSTM layers.
        bias: whether the layers have biases.
        dropout: dropout between layers in training, as in ``nn.LSTM``.
        in_key: the input key; the state keys default to ``"recurrent_state_h"`` and
            ``"recurrent_state_c"``. Exclusive with ``in_keys``.
        in_keys: ``[input, h, c]`` in full.
        out_key: the output key; the next states go to ``("next", h)``, ``("next", c)``.
        out_keys: ``[output, ("next", h), ("next", c)]`` in full.
        device: where to create the parameters.
        recurrent_backend: ``"auto"``, ``"pad"``, ``"scan"`` or ``"triton"`` (see the
            recurrent guide); ``"auto"`` is ``"pad"`` on a GPU in eager and ``"scan"`` on
            the CPU or under ``torch.compile``; it never picks ``"triton"``, which needs
            CUDA (or ``TRITON_INTERPRET=1`` on the CPU, for testing). TorchRL's
            ``python_based=True`` is taken as ``"scan"`` (the cell math in torch ops over
            time; the one-step sequential call runs ``nn.LSTM`` with any backend).
        recurrent_recompute: ``"none"`` or ``"full"`` (scan: do not store the gates;
            replay the forward chunk by chunk in the backward).
        recurrent_compute_dtype: dtype of the recurrent-mode computation (e.g.
            ``torch.bfloat16``); outputs come back in the input's dtype.
        recurrent_matmul_precision: ``"ieee"``, ``"tf32"`` or ``"tf32x3"`` for the
            Triton backend; ``None`` follows :func:`set_recurrent_matmul_precision`.
            The torch backends ignore it.

    Raises:
        ValueError: on bad sizes, keys, backend, recompute, dtype or precision.
        BackendUnavailableError: ``recurrent_backend="triton"`` without triton, or
            on the CPU without ``TRITON_INTERPRET=1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_recurrent import LSTMModule, set_recurrent_mode
        >>> lstm = LSTMModule(3, 8, in_key="obs", out_key="feat")
        >>> td = TensorDict({"obs": torch.randn(4, 3),
        ...                  "is_init": torch.ones(4, 1, dtype=torch.bool)}, [4])
        >>> lstm(td)["next", "recurrent_state_h"].shape
        torch.Size([4, 1, 8])
        >>> seq = TensorDict({"obs": torch.randn(4, 10, 3),
        ...                   "is_init": torch.zeros(4, 10, 1, dtype=torch.bool)}, [4, 10])
        >>> seq["is_init"][:, 0] = True
        >>> with set_recurrent_mode(True):
        ...     lstm(seq)["feat"].shape
        torch.Size([4, 10, 8])
    """

    _rnn_class = nn.LSTM
    _rnn_attribute = "lstm"
    _default_state_keys = (LSTM_STATE_H, LSTM_STATE_C)

    @property
    def rnn(self) -> nn.LSTM:
        """The wrapped ``nn.LSTM`` (batch-first)."""
        return self.lstm


class GRUModule(_TorchRNNModule):
    """An ``nn.GRU`` as a TensorDict module, in sequential or recurrent mode.

    Same contract as :class:`LSTMModule` with a single state, by default
    ``"recurrent_state"`` of shape ``[*B, num_layers, hidden_size]`` (next state under
    ``("next", "recurrent_state")``).

    Args:
        input_size: features of the input entry (its last dim).
        hidden_size: features of the state.
        num_layers: stacked GRU layers.
        bias: whether the layers have biases.
        dropout: dropout between layers in training, as in ``nn.GRU``.
        in_key: the input key (state key ``"recurrent_state"``). Exclusive with ``in_keys``.
        in_keys: ``[input, state]`` in full.
        out_key: the output key; the next state goes to ``("next", state)``.
        out_keys: ``[output, ("next", state)]`` in full.
        device: where to create the parameters.
        recurrent_backend: ``"auto"``, ``"pad"``, ``"scan"`` or ``"triton"`` (as for
            :class:`LSTMModule`; ``python_based=True`` is ``"scan"``).
        recurrent_recompute: ``"none"`` or ``"full"``.
        recurrent_compute_dtype: dtype of the recurrent-mode computation.
        recurrent_matmul_precision: ``"ieee"``, ``"tf32"`` or ``"tf32x3"`` (Triton).

    Raises:
        ValueError, BackendUnavailableError: as for :class:`LSTMModule`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_recurrent import GRUModule
        >>> gru = GRUModule(3, 8, num_layers=2, in_key="obs", out_key="feat")
        >>> td = TensorDict({"obs": torch.randn(4, 3),
        ...                  "is_init": torch.ones(4, 1, dtype=torch.bool)}, [4])
        >>> gru(td)["next", "recurrent_state"].shape
        torch.Size([4, 2, 8])
    """

    _rnn_class = nn.GRU
    _rnn_attribute = "gru"
    _default_state_keys = (GRU_STATE,)

    @property
    def rnn(self) -> nn.GRU:
        """The wrapped ``nn.GRU`` (batch-first)."""
        return self.gru
