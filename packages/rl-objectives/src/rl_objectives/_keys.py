"""Key names read and written by rl-objectives (TorchRL's names; see the glossary)."""

from __future__ import annotations

__all__ = [
    "ACTION",
    "ACTION_VALUE",
    "ADVANTAGE",
    "DONE",
    "NEXT",
    "REWARD",
    "SAMPLE_LOG_PROB",
    "STATE_ACTION_VALUE",
    "STATE_VALUE",
    "TD_ERROR",
    "TERMINATED",
    "VALUE_TARGET",
]

NEXT = "next"
ACTION = "action"
ACTION_VALUE = "action_value"
ADVANTAGE = "advantage"
DONE = "done"
REWARD = "reward"
SAMPLE_LOG_PROB = "sample_log_prob"
STATE_ACTION_VALUE = "state_action_value"
STATE_VALUE = "state_value"
TD_ERROR = "td_error"
TERMINATED = "terminated"
VALUE_TARGET = "value_target"
