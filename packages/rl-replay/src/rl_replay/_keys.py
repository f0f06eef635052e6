"""Key names read and written by rl-replay (listed in the glossary)."""

from __future__ import annotations

INDEX = "index"
"""Storage index of each sampled row (flat over the storage's batch dims)."""

PRIORITY_WEIGHT = "priority_weight"
"""Importance-sampling weight of each prioritized sample, ``(p_i / p_min) ** -beta``."""

TD_ERROR = "td_error"
"""Default key from which ``update_tensordict_priority`` reads the new priorities."""

IS_INIT = "is_init"
"""Marks the first step of a slice (and of a trajectory) for recurrent training."""

TRAJ_IDS = ("collector", "traj_ids")
"""Trajectory ids written by rl-collectors."""

DONE = ("next", "done")
TRUNCATED = ("next", "truncated")
