"""Shared fixtures: the float64 cell-loop reference every backend is compared with."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


def _cells(rnn: nn.RNNBase) -> list[nn.Module]:
    """One float64 LSTMCell/GRUCell per layer with ``rnn``'s weights."""
    cell_cls = nn.LSTMCell if isinstance(rnn, nn.LSTM) else nn.GRUCell
    cells = []
    for layer in range(rnn.num_layers):
        in_size = rnn.input_size if layer == 0 else rnn.hidden_size
        cell = cell_cls(in_size, rnn.hidden_size, bias=rnn.bias, dtype=torch.float64)
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                if hasattr(cell, name) and getattr(cell, name) is not None:
                    getattr(cell, name).copy_(getattr(rnn, f"{name}_l{layer}"))
        cells.append(cell)
    return cells


def reference(rnn: nn.RNNBase, x, is_init, states0):
    """Step-by-step float64 loop that zeros the state where ``is_init``.

    Args:
        rnn: the module's ``nn.LSTM``/``nn.GRU`` (weights are copied).
        x: ``[N, T, I]``; is_init: ``[N, T]`` bool; states0: ``[N, L, H]`` each.

    Returns:
        ``(cells, y [N, T, H], next states [N, T, L, H] each, masked to segment ends)``.
    """
    cells = _cells(rnn)
    lstm = isinstance(rnn, nn.LSTM)
    n_layers = rnn.num_layers
    states = [[s[:, layer].double() for s in states0] for layer in range(n_layers)]
    ys, nexts = [], []
    for t in range(x.shape[1]):
        keep = (~is_init[:, t]).double()[:, None]
        inp = x[:, t].double()
        for layer, cell in enumerate(cells):
            st = [s * keep for s in states[layer]]
            out = cell(inp, tuple(st)) if lstm else cell(inp, st[0])
            states[layer] = list(out) if lstm else [out]
            inp = states[layer][0]
        ys.append(inp)
        nexts.append(
            [
                torch.stack([states[lyr][j] for lyr in range(n_layers)], 1)
                for j in range(len(states0))
            ]
        )
    y = torch.stack(ys, 1)
    seg_end = torch.cat([is_init[:, 1:], torch.ones_like(is_init[:, :1])], 1)[..., None, None]
    nxt = [
        torch.where(seg_end, torch.stack([n[j] for n in nexts], 1), 0) for j in range(len(states0))
    ]
    return cells, y, nxt


@pytest.fixture
def recurrent_reference():
    """The float64 reference loop (see :func:`reference`)."""
    return reference


def random_is_init(n: int, t: int, p: float, seed: int) -> torch.Tensor:
    """Random resets, including one at t=0 and one at the last step."""
    gen = torch.Generator().manual_seed(seed)
    is_init = torch.rand(n, t, generator=gen) < p
    is_init[0, 0] = True
    is_init[-1, -1] = True
    return is_init


@pytest.fixture
def make_is_init():
    return random_is_init


@pytest.fixture
def clone_double():
    return lambda m: copy.deepcopy(m).double()
