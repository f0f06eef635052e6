"""Random recurrent-mode inputs for a module, shared by the backend and Triton tests."""

from __future__ import annotations

import torch
from tensordict import TensorDict


def random_batch(
    module: torch.nn.Module, is_init: torch.Tensor, seed: int = 1, grad: bool = True
) -> tuple[TensorDict, torch.Tensor, list[torch.Tensor]]:
    """A ``[N, T]`` batch for ``module`` (input key ``"x"``) with random initial states.

    Args:
        module: an ``LSTMModule``/``GRUModule`` whose input key is ``"x"``.
        is_init: ``[N, T]`` bool; the batch takes its shape.
        seed: seed of the input and the states.
        grad: whether the input and the initial states require grad.

    Returns:
        ``(td, x [N, T, I], initial states [N, L, H] each)``; ``td`` holds every state
        expanded over time, as a replay buffer would.
    """
    n, t = is_init.shape
    gen = torch.Generator().manual_seed(seed)
    rnn = module.rnn
    x = torch.randn(n, t, rnn.input_size, generator=gen).requires_grad_(grad)
    td = TensorDict({"x": x, "is_init": is_init[..., None]}, [n, t])
    states0 = []
    for key in module.in_keys[1:-1]:
        s0 = torch.randn(n, rnn.num_layers, rnn.hidden_size, generator=gen).requires_grad_(grad)
        td.set(key, s0[:, None].expand(n, t, *s0.shape[1:]))
        states0.append(s0)
    return td, x, states0
