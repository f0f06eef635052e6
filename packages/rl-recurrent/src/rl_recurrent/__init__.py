"""Recurrent TensorDict modules (LSTM, GRU) with fast reset-aware backends.

See ``docs/recurrent.md`` for the modes and backends and
``docs/internals/recurrent-state-lifecycle.md`` for how a hidden state travels.
"""

from __future__ import annotations

from rl_recurrent._keys import GRU_STATE, IS_INIT, LSTM_STATE_C, LSTM_STATE_H
from rl_recurrent._mode import (
    recurrent_matmul_precision,
    recurrent_mode,
    set_recurrent_matmul_precision,
    set_recurrent_mode,
)
from rl_recurrent._modules import GRUModule, LSTMModule
from rl_recurrent._rssm import RSSMPosterior, RSSMPrior, RSSMRollout
from rl_recurrent.exceptions import (
    BackendUnavailableError,
    MissingIsInitError,
    MissingRecurrentStateError,
    RecurrentError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "GRUModule",
    "GRU_STATE",
    "IS_INIT",
    "LSTMModule",
    "LSTM_STATE_C",
    "LSTM_STATE_H",
    "MissingIsInitError",
    "MissingRecurrentStateError",
    "RSSMPosterior",
    "RSSMPrior",
    "RSSMRollout",
    "RecurrentError",
    "__version__",
    "recurrent_matmul_precision",
    "recurrent_mode",
    "set_recurrent_matmul_precision",
    "set_recurrent_mode",
]
