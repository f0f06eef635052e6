"""Key names used by rl-recurrent, defined once."""

from __future__ import annotations

__all__ = [
    "IS_INIT",
    "LSTM_STATE_C",
    "LSTM_STATE_H",
    "GRU_STATE",
    "NEXT",
]

IS_INIT = "is_init"
"""Root entry marking the first step of each trajectory (written by ``InitTracker``)."""

NEXT = "next"
"""Sub-tensordict that holds what a step produced, including the next hidden state."""

LSTM_STATE_H = "recurrent_state_h"
"""Default key of an LSTM's hidden state ``h``, shape ``[*B, num_layers, hidden_size]``."""

LSTM_STATE_C = "recurrent_state_c"
"""Default key of an LSTM's cell state ``c``, shape ``[*B, num_layers, hidden_size]``."""

GRU_STATE = "recurrent_state"
"""Default key of a GRU's hidden state, shape ``[*B, num_layers, hidden_size]``."""
