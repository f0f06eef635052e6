"""``Collector``'s seeds and state (``set_seed``, ``state_dict``, ``load_state_dict``,
``reset``): what a checkpoint saves and restores, apart from the rollout loop."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["CollectorStateMixin"]


class CollectorStateMixin:
    """Seeds and state of a :class:`~rl_collectors.Collector` (its counters, policy
    weights, env state); the attributes are the collector's."""

    env: Any
    policy: Any
    weight_updater: Any
    frames: int
    iterations: int
    policy_version: int
    _traj: Any
    _seed: int | None
    _needs_reset: bool

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed the env (and random actions); the next batch starts with a reset.

        Returns:
            The env's ``set_seed`` output: the seed to give the next env.
        """
        torch.manual_seed(seed)
        self._needs_reset = True
        self._seed = int(seed)
        return self.env.set_seed(seed, static_seed=static_seed)

    def state_dict(self) -> dict[str, Any]:
        """Policy weights, env state (when it has one: transform statistics), frame,
        iteration and trajectory counters, policy version and the last seed.

        Random-frame progress is ``frames`` (``init_random_frames`` is compared with it).
        The gymnasium envs' internal state is not saved: see :meth:`load_state_dict`.
        """
        state: dict[str, Any] = {
            "frames": self.frames,
            "iter": self.iterations,
            "policy_version": self.policy_version,
            "traj": self._traj.state_dict(),
            "seed": self._seed,
        }
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        if hasattr(self.env, "state_dict"):
            state["env_state_dict"] = self.env.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        The counters continue where they were (a run with ``total_frames`` collects
        only what is left), the weight updater counts versions from the saved one, and
        the next batch starts with a reset: episodes in flight when the state was saved
        restart. A collector seeded with :meth:`set_seed` reseeds its env with
        ``seed + iterations``, so two resumes from one state collect the same data.
        """
        self.frames, self.iterations = int(state["frames"]), int(state["iter"])
        self.policy_version = int(state["policy_version"])
        if hasattr(self.weight_updater, "restore_version"):
            self.weight_updater.restore_version(self.policy_version)
        self._traj.load_state_dict(state["traj"])
        if "policy_state_dict" in state:
            self.policy.load_state_dict(state["policy_state_dict"])
        if "env_state_dict" in state:
            self.env.load_state_dict(state["env_state_dict"])
        self._seed = state.get("seed")
        if self._seed is not None:
            self.env.set_seed(self._seed + self.iterations)
        self._needs_reset = True

    def reset(self) -> None:
        """Reset every sub-env before the next batch (new trajectories start)."""
        self._needs_reset = True
