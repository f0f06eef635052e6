"""The ``"pad"`` backend: split at resets, pack, one ``nn.LSTM`` / ``nn.GRU`` call.

Every row of ``[N, T]`` is cut where ``is_init`` is true; the pieces ("segments") are
gathered into a padded ``[S, L, I]`` block and packed with their true lengths, so the
RNN never runs over padding: the final state it returns for a short segment is the
state after that segment's last real step (cuDNN on the GPU, the native loop on the CPU).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from rl_recurrent._reset import zero_where

__all__ = ["run_pad"]


def _segments(is_init: Tensor) -> tuple[Tensor, Tensor]:
    """Flat start index and length of every segment of ``is_init`` ``[N, T]``."""
    n, t = is_init.shape
    starts = is_init.clone()
    starts[:, 0] = True
    flat_starts = starts.reshape(-1).nonzero().squeeze(-1)
    ends = torch.cat([flat_starts[1:], flat_starts.new_tensor([n * t])])
    return flat_starts, ends - flat_starts


def run_pad(
    rnn: nn.LSTM | nn.GRU,
    x: Tensor,
    is_init: Tensor,
    states0: tuple[Tensor, ...],
    *,
    params: dict[str, Tensor] | None = None,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Run ``rnn`` over ``x`` ``[N, T, I]`` with resets where ``is_init`` ``[N, T]``.

    Args:
        rnn: a batch-first ``nn.LSTM`` or ``nn.GRU``.
        x: the inputs.
        is_init: bool, true at the first step of a trajectory.
        states0: the states before step 0, ``[num_layers, N, H]`` each, already zeroed
            where ``is_init[:, 0]``.
        params: parameters to call ``rnn`` with instead of its own (a compute dtype).

    Returns:
        ``y`` ``[N, T, H]`` and the next states ``[N, T, num_layers, H]`` each, exact at
        the last step of every segment and zero elsewhere.
    """
    n, t = is_init.shape
    flat_starts, lengths = _segments(is_init)
    max_len = int(lengths.max())
    steps = torch.arange(max_len, device=x.device)
    valid = steps < lengths[:, None]
    index = torch.where(valid, flat_starts[:, None] + steps, 0)
    padded = x.reshape(n * t, -1)[index]
    mid_row = (flat_starts % t != 0)[None]  # a reset inside the row: start from zero
    seg_states = tuple(zero_where(s[:, flat_starts // t], mid_row) for s in states0)
    packed = pack_padded_sequence(padded, lengths.cpu(), batch_first=True, enforce_sorted=False)
    hx = seg_states if isinstance(rnn, nn.LSTM) else seg_states[0]
    if params is None:
        y, h_n = rnn(packed, hx)
    else:
        y, h_n = functional_call(rnn, params, (packed, hx))
    y, _ = pad_packed_sequence(y, batch_first=True, total_length=max_len)
    y = y[valid].view(n, t, -1)
    h_n = h_n if isinstance(h_n, tuple) else (h_n,)
    ends = flat_starts + lengths - 1
    nxt = tuple(
        s.new_zeros(n * t, *s.shape[:1], s.shape[-1]).index_copy(0, ends, s.transpose(0, 1))
        for s in h_n
    )
    return y, tuple(s.view(n, t, *s.shape[1:]) for s in nxt)
