"""What LSTMModule and GRUModule share: keys, validation and the two modes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import Tensor, nn

from rl_recurrent._backends import check_backend_available, run_recurrent
from rl_recurrent._keys import IS_INIT, NEXT
from rl_recurrent._mode import (
    BACKENDS,
    RECOMPUTE,
    check_precision,
    recurrent_matmul_precision,
    recurrent_mode,
)
from rl_recurrent._primer import make_primer
from rl_recurrent._reset import zero_where
from rl_recurrent.exceptions import MissingIsInitError, MissingRecurrentStateError

__all__ = ["RecurrentModuleBase"]


def _as_next(key: NestedKey) -> tuple[str, ...]:
    return (NEXT, *((key,) if isinstance(key, str) else tuple(key)))


def resolve_keys(
    in_key, in_keys, out_key, out_keys, state_keys: Sequence[str]
) -> tuple[list[NestedKey], list[NestedKey]]:
    """TorchRL's key rules: one of ``in_key``/``in_keys`` and of ``out_key``/``out_keys``."""
    if (in_key is None) == (in_keys is None):
        raise ValueError("pass exactly one of in_key= and in_keys=, got both or neither")
    if (out_key is None) == (out_keys is None):
        raise ValueError("pass exactly one of out_key= and out_keys=, got both or neither")
    n = 1 + len(state_keys)
    in_keys = [in_key, *state_keys] if in_keys is None else list(in_keys)
    out_keys = (
        [out_key, *(_as_next(k) for k in in_keys[1:])] if out_keys is None else list(out_keys)
    )
    if len(in_keys) == n + 1 and in_keys[-1] == IS_INIT:
        in_keys = in_keys[:-1]
    if len(in_keys) != n or len(out_keys) != n:
        raise ValueError(
            f"in_keys and out_keys must each have {n} entries (input then states), got "
            f"in_keys={in_keys} and out_keys={out_keys}"
        )
    for k_in, k_out in zip(in_keys[1:], out_keys[1:], strict=True):
        if _as_next(k_in) != (k_out if isinstance(k_out, tuple) else (k_out,)):
            raise ValueError(
                f"out state key {k_out!r} must be ('next', {k_in!r}): the collector moves "
                "('next', key) to key between steps, which is how the state is carried"
            )
    return in_keys, out_keys


class RecurrentModuleBase(TensorDictModuleBase):
    """Shared machinery; see :class:`~rl_recurrent.LSTMModule` for the contract."""

    rnn: nn.LSTM | nn.GRU

    def _setup(
        self,
        rnn: nn.LSTM | nn.GRU,
        in_keys: list[NestedKey],
        out_keys: list[NestedKey],
        backend: str,
        recompute: str,
        compute_dtype: torch.dtype | None,
        precision: str | None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"recurrent_backend must be one of {BACKENDS}, got {backend!r}")
        check_backend_available(backend)
        if recompute not in RECOMPUTE:
            raise ValueError(f"recurrent_recompute must be one of {RECOMPUTE}, got {recompute!r}")
        if compute_dtype is not None and not (
            isinstance(compute_dtype, torch.dtype) and compute_dtype.is_floating_point
        ):
            raise ValueError(
                f"recurrent_compute_dtype must be None or a floating torch.dtype, got "
                f"{compute_dtype!r}"
            )
        if precision is not None:
            check_precision(precision, "recurrent_matmul_precision")
        self.in_keys = [*in_keys, IS_INIT]
        self.out_keys = out_keys
        self.recurrent_backend = backend
        self.recurrent_recompute = recompute
        self.recurrent_compute_dtype = compute_dtype
        self.recurrent_matmul_precision = precision

    @property
    def _state_keys(self) -> list[NestedKey]:
        return self.in_keys[1:-1]

    def make_tensordict_primer(self) -> Any:
        """Return the env transform that declares the hidden states and zero-fills them.

        Append it to the environment (``TransformedEnv(env, module.make_tensordict_primer())``
        or ``env.append_transform(...)``) so that reset writes zeros under each state key
        and collectors allocate and carry them. Needs ``rl-envs`` (``pip install
        'rl-recurrent[envs]'``).

        Returns:
            An ``rl_envs.TensorDictPrimer`` with one ``Unbounded`` spec of shape
            ``(num_layers, hidden_size)`` per state key.

        Raises:
            ImportError: if rl-envs is not installed.
        """
        shape = (self.rnn.num_layers, self.rnn.hidden_size)
        return make_primer(self._state_keys, shape)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Read the input and states from ``tensordict``; write the output and next states."""
        if recurrent_mode():
            return self._forward_recurrent(tensordict)
        return self._forward_sequential(tensordict)

    def _read_input(self, tensordict: TensorDictBase) -> Tensor:
        x = tensordict.get(self.in_keys[0], None)
        if x is None:
            raise KeyError(f"{type(self).__name__}: input key {self.in_keys[0]!r} is missing")
        if x.shape[-1] != self.rnn.input_size:
            raise ValueError(
                f"{type(self).__name__}: {self.in_keys[0]!r} must have input_size="
                f"{self.rnn.input_size} features in its last dim, got shape {tuple(x.shape)}"
            )
        return x

    def _read_is_init(self, tensordict: TensorDictBase) -> Tensor:
        is_init = tensordict.get(IS_INIT, None)
        if is_init is None:
            mode = "recurrent" if recurrent_mode() else "sequential"
            raise MissingIsInitError(
                f"{type(self).__name__} in {mode} mode needs the {IS_INIT!r} entry to know "
                "where trajectories start: add InitTracker() to the environment, or set "
                f"td[{IS_INIT!r}] (bool, shape [*batch, 1]) yourself"
            )
        is_init = is_init.to(torch.bool)
        batch = tensordict.batch_size
        if is_init.shape == (*batch, 1):
            is_init = is_init.squeeze(-1)
        if is_init.shape != batch:
            raise ValueError(
                f"{IS_INIT!r} must have shape [*batch] or [*batch, 1] with batch="
                f"{list(batch)}, got {list(is_init.shape)}"
            )
        return is_init

    def _read_state(self, tensordict: TensorDictBase, key: NestedKey, starts: Tensor, like: Tensor):
        """The state under ``key`` at the given steps, zero where ``starts``; shape
        ``[*S, L, H]``."""
        shape = (*starts.shape, self.rnn.num_layers, self.rnn.hidden_size)
        state = tensordict.get(key, None)
        if state is None:
            if not bool(starts.all()):
                raise MissingRecurrentStateError(
                    f"{type(self).__name__}: the hidden state {key!r} is missing at steps "
                    "that do not start a trajectory, so it was not carried from ('next', "
                    f"{key!r}). Append the primer to the environment: env.append_transform("
                    "module.make_tensordict_primer())"
                )
            return like.new_zeros(shape)
        if recurrent_mode():
            state = state[..., 0, :, :]
        if state.shape != shape:
            raise ValueError(
                f"{type(self).__name__}: state {key!r} must have shape {list(shape)} "
                f"([*batch, num_layers, hidden_size]), got {list(state.shape)}"
            )
        return zero_where(state, starts)

    @profiled("RecurrentModule.step")
    def _forward_sequential(self, tensordict: TensorDictBase) -> TensorDictBase:
        x = self._read_input(tensordict)
        is_init = self._read_is_init(tensordict)
        states = [self._read_state(tensordict, k, is_init, x) for k in self._state_keys]
        batch = is_init.shape
        flat = tuple(s.reshape(-1, *s.shape[-2:]).transpose(0, 1).contiguous() for s in states)
        hx = flat if isinstance(self.rnn, nn.LSTM) else flat[0]
        y, h_n = self.rnn(x.reshape(-1, 1, x.shape[-1]), hx)
        h_n = h_n if isinstance(h_n, tuple) else (h_n,)
        tensordict.set(self.out_keys[0], y.reshape(*batch, -1))
        for key, s in zip(self.out_keys[1:], h_n, strict=True):
            tensordict.set(key, s.transpose(0, 1).reshape(*batch, *s.shape[:1], s.shape[-1]))
        return tensordict

    @profiled("RecurrentModule.sequence")
    def _forward_recurrent(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        if len(batch) < 1:
            raise ValueError(
                f"{type(self).__name__} in recurrent mode needs a batch shape [*B, T] with "
                f"time last, got batch_size={list(batch)}"
            )
        x = self._read_input(tensordict)
        is_init = self._read_is_init(tensordict)
        states = [self._read_state(tensordict, k, is_init[..., 0], x) for k in self._state_keys]
        t = batch[-1]
        flat_init = is_init.reshape(-1, t)
        states0 = tuple(s.reshape(-1, *s.shape[-2:]).transpose(0, 1) for s in states)
        precision = self.recurrent_matmul_precision or recurrent_matmul_precision()
        y, nxt = run_recurrent(
            self.rnn,
            x.reshape(-1, t, x.shape[-1]),
            flat_init,
            states0,
            backend=self.recurrent_backend,
            recompute=self.recurrent_recompute == "full",
            compute_dtype=self.recurrent_compute_dtype,
            precision=precision,
        )
        tensordict.set(self.out_keys[0], y.reshape(*batch, -1))
        for key, s in zip(self.out_keys[1:], nxt, strict=True):
            tensordict.set(key, s.reshape(*batch, *s.shape[-2:]))
        return tensordict
