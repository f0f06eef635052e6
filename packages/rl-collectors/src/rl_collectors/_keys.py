"""Key names written by the collectors, defined once (see ``docs/collectors.md``)."""

from __future__ import annotations

__all__ = ["ACTION", "COLLECTOR", "DONE", "MASK", "NEXT", "POLICY_VERSION", "TRAJ_IDS"]

ACTION = "action"
"""The key the policy must write (the env's ``action_key`` for single-action envs)."""
NEXT = "next"
"""Sub-TensorDict holding what a step produced."""
DONE = "done"
"""``terminated | truncated`` under ``"next"``; a new trajectory starts after it."""
COLLECTOR = "collector"
"""Sub-TensorDict of the entries the collector adds."""
TRAJ_IDS = (COLLECTOR, "traj_ids")
"""int64 ``[*B, T]``: trajectory id, unique across batches and workers."""
POLICY_VERSION = (COLLECTOR, "policy_version")
"""int64 ``[*B, T]``: the weight version (number of updates) of the policy that acted."""
MASK = (COLLECTOR, "mask")
"""bool ``[num_trajs, max_len]`` written by ``split_trajectories``: True on real steps."""
