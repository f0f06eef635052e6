"""One-pass CPU kernels (numba) for GAE and the TD(lambda) return.

On the CPU, without autograd, with scalar ``gamma``/``lmbda`` (the usual training call),
the estimators are one backward loop per row: each element is read once and each output
written once, in the order they lie in memory (a rollout leaf ``[*B, T, *F]`` keeps time
contiguous when ``F`` is empty). The chunked scan of :mod:`rl_objectives.value._scan`
needs about a dozen passes over the data plus ``2 sqrt(T)`` tensor ops, each costing
microseconds of dispatch; on a new batch each call (training) its temporaries also
miss the caches. Measured on ``[256, 1000]`` float32 with fresh inputs: see
``benchmarks/bench_objectives.py``.

The kernels see every tensor as ``[O, T]`` (``O`` = the dims before time; the usual
rollout leaf, time contiguous) or, when dims follow time, ``[O, T, I]``; they loop ``o``,
then ``t`` backwards (then ``i``), keeping one running value per row. They compute in
float64 (``gamma`` and ``lmbda`` arrive as Python floats) and store in the output dtype,
so they agree with the reference loops to float32 rounding.

They run on batches of at least :data:`MIN_NUMEL` elements only. Below that the chunked
scan costs about a millisecond a call, while importing numba and loading a kernel from
its cache costs one to two seconds once per process (compiling, once per machine, about
a second a kernel): more than a small-batch run ever saves (measured on this 2-core
machine, loaded, median of 30 fresh calls: ``[1000]`` scan 0.81 ms / kernel 0.08 ms,
``[64, 1000]`` 1.34 / 0.61 ms, ``[256, 1000]`` 12.0 / 6.0 ms; the import and load
2.0 to 3.5 s). So numba is imported at the first call that uses a kernel, never at an
estimator's construction; :func:`load` preloads one for a caller that wants the first
batch to cost what the others do. Where numba cannot be imported, the estimators keep
the chunked scan.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

__all__ = ["MIN_NUMEL", "gae_kernel", "load", "td_lambda_kernel", "usable"]

_DTYPES = (torch.float32, torch.float64)

MIN_NUMEL = 65_536
"""Batches smaller than this (elements of ``reward``) take the chunked scan: see above."""


@functools.cache
def _available() -> bool:
    return importlib.util.find_spec("numba") is not None


# The step functions as jit dispatchers: numba resolves a kernel's globals when it
# compiles it, so :func:`_kernels` binds these first.
_gae_step_jit: Any = None
_td_step_jit: Any = None


@functools.cache
def _kernels() -> SimpleNamespace:
    global _gae_step_jit, _td_step_jit
    import numba

    jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _gae_step_jit, _td_step_jit = jit(_gae_step), jit(_td_step)
    return SimpleNamespace(gae=jit(_gae), gae_rows=jit(_gae_rows), td_lambda=jit(_td_lambda),
                           td_lambda_rows=jit(_td_lambda_rows))


def _gae_step(v, nv, r, d, m, gamma, coef, x):  # noqa: ANN001, ANN202
    """One step back: ``(A_t, V_t)`` from ``A_{t+1} = x``."""
    v = np.float64(v)
    delta = r - v + (0.0 if m else gamma * nv)
    return delta + (0.0 if d else coef * x), v


def _gae_rows(value, next_value, reward, done, terminated, gamma, coef, advantage, target):  # noqa: ANN001, ANN202
    """``A_t = delta_t + coef (1 - d_t) A_{t+1}``; ``target = A + V``; all ``[O, T]``.

    The running value is a scalar the compiler keeps in a register. Measured here
    (``[256, 1000]`` float32, loaded machine, best of 50): 0.74 ms, against 1.24 ms for
    the same loop over ``[O, T, 1]`` arrays (one more stride per load) and 2.2 ms with
    the running value in a one-element array (a store and a reload on the carried chain).
    """
    outer, steps = reward.shape
    for o in range(outer):
        x = 0.0
        for t in range(steps - 1, -1, -1):
            x, v = _gae_step_jit(value[o, t], next_value[o, t], reward[o, t], done[o, t],
                                 terminated[o, t], gamma, coef, x)
            advantage[o, t] = x
            target[o, t] = x + v


def _gae(value, next_value, reward, done, terminated, gamma, coef, advantage, target):  # noqa: ANN001, ANN202
    """:func:`_gae_rows` on ``[O, T, I]`` arrays, ``I > 1``: one running value per ``i``."""
    outer, steps, inner = reward.shape
    running = np.zeros(inner)
    for o in range(outer):
        running[:] = 0.0
        for t in range(steps - 1, -1, -1):
            for i in range(inner):
                x, v = _gae_step_jit(value[o, t, i], next_value[o, t, i], reward[o, t, i],
                                     done[o, t, i], terminated[o, t, i], gamma, coef,
                                     running[i])
                running[i] = x
                advantage[o, t, i] = x
                target[o, t, i] = x + v


def _td_step(nv, r, d, m, gamma, bootstrap, trace, x):  # noqa: ANN001, ANN202
    """One step back: ``G_t`` from ``G_{t+1} = x``; ``d`` true at a cut (a done or the
    batch's last step). ``bootstrap = gamma (1 - lmbda)`` and ``trace = gamma lmbda``, so
    the carried chain is one multiply and one add, as in GAE."""
    g = np.float64(r)
    if m:
        return g
    if d:
        return g + gamma * nv
    return g + bootstrap * nv + trace * x


def _td_lambda_rows(next_value, reward, done, terminated, gamma, lmbda, out):  # noqa: ANN001, ANN202
    """``G_t = r_t + gamma (1 - m_t)[(1 - l_t) V' + l_t G_{t+1}]`` on ``[O, T]`` arrays,
    the last step a cut."""
    outer, steps = reward.shape
    bootstrap, trace = gamma * (1.0 - lmbda), gamma * lmbda
    for o in range(outer):
        x = _td_step_jit(next_value[o, steps - 1], reward[o, steps - 1], True,
                         terminated[o, steps - 1], gamma, bootstrap, trace, 0.0)
        out[o, steps - 1] = x
        for t in range(steps - 2, -1, -1):
            x = _td_step_jit(next_value[o, t], reward[o, t], done[o, t], terminated[o, t],
                             gamma, bootstrap, trace, x)
            out[o, t] = x


def _td_lambda(next_value, reward, done, terminated, gamma, lmbda, out):  # noqa: ANN001, ANN202
    """:func:`_td_lambda_rows` on ``[O, T, I]`` arrays, ``I > 1``."""
    outer, steps, inner = reward.shape
    bootstrap, trace = gamma * (1.0 - lmbda), gamma * lmbda
    running = np.zeros(inner)
    for o in range(outer):
        running[:] = 0.0
        for t in range(steps - 1, -1, -1):
            for i in range(inner):
                cut = done[o, t, i] != 0 or t == steps - 1
                x = _td_step_jit(next_value[o, t, i], reward[o, t, i], cut,
                                 terminated[o, t, i], gamma, bootstrap, trace, running[i])
                running[i] = x
                out[o, t, i] = x


@functools.cache
def load(kind: str) -> None:
    """Import numba and load the float32 ``[O, T]`` kernel of ``kind`` (``"gae"`` or
    ``"td_lambda"``) now, by calling it on one element; nothing without numba."""
    if not _available():
        return
    x, mask = np.zeros((1, 1), np.float32), np.zeros((1, 1), np.uint8)
    if kind == "gae":
        _kernels().gae_rows(x, x, x, mask, mask, 0.5, 0.5, x.copy(), x.copy())
    else:
        _kernels().td_lambda_rows(x, x, mask, mask, 0.5, 0.5, x.copy())


def usable(gamma: object, lmbda: object, *tensors: torch.Tensor) -> bool:
    """True when the kernels apply: CPU float tensors of one dtype, at least
    :data:`MIN_NUMEL` elements, scalar coefficients, numba importable (autograd and
    ``torch.compile`` are excluded by the caller)."""
    if not (isinstance(gamma, float) and isinstance(lmbda, float)) or not _available():
        return False
    if tensors[0].numel() < MIN_NUMEL:
        return False
    dtype = tensors[0].dtype
    return dtype in _DTYPES and all(
        t.device.type == "cpu" and t.dtype == dtype for t in tensors
    )


def _layout(x: torch.Tensor, time_dim: int) -> tuple[int, ...]:
    """``(O, T)`` when nothing follows time, else ``(O, T, I)``."""
    shape = x.shape
    outer, inner = math.prod(shape[:time_dim]), math.prod(shape[time_dim + 1 :])
    return (outer, shape[time_dim]) if inner == 1 else (outer, shape[time_dim], inner)


def _array(x: torch.Tensor, layout: tuple[int, ...]) -> np.ndarray:
    """``x`` as a C-contiguous array of ``layout`` (a view when ``x`` is contiguous)."""
    x = x.detach()
    if x.dtype == torch.bool:
        x = x.view(torch.uint8)
    return x.reshape(layout).contiguous().numpy()


def gae_kernel(gamma: float, lmbda: float, state_value: torch.Tensor,
               next_state_value: torch.Tensor, reward: torch.Tensor, done: torch.Tensor,
               terminated: torch.Tensor, time_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(advantage, value_target)`` in one pass; ``time_dim`` non-negative, bool masks."""
    advantage = torch.empty(reward.shape, dtype=reward.dtype)
    target = torch.empty(reward.shape, dtype=reward.dtype)
    layout = _layout(reward, time_dim)
    kernel = _kernels().gae_rows if len(layout) == 2 else _kernels().gae
    kernel(*(_array(x, layout) for x in (state_value, next_state_value, reward, done, terminated)),
           gamma, gamma * lmbda, _array(advantage, layout), _array(target, layout))
    return advantage, target


def td_lambda_kernel(gamma: float, lmbda: float, next_state_value: torch.Tensor,
                     reward: torch.Tensor, done: torch.Tensor, terminated: torch.Tensor,
                     time_dim: int) -> torch.Tensor:
    """The lambda-return in one pass; ``time_dim`` non-negative, bool masks."""
    out = torch.empty(reward.shape, dtype=reward.dtype)
    layout = _layout(reward, time_dim)
    kernel = _kernels().td_lambda_rows if len(layout) == 2 else _kernels().td_lambda
    kernel(*(_array(x, layout) for x in (next_state_value, reward, done, terminated)),
           gamma, lmbda, _array(out, layout))
    return out
