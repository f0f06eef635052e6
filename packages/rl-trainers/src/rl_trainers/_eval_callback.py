"""``EvalCallback``: SB3's periodic evaluation that keeps the best policy so far, as a
Trainer hook."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from rl_envs import EnvBase
from rl_modules import ExplorationType
from torch import nn

from rl_trainers._evaluate import EvalResult, evaluate
from rl_trainers._export import save_policy
from rl_trainers._trainer import Trainer
from rl_trainers.exceptions import TrainerError

__all__ = ["EvalCallback"]


class EvalCallback:
    """Every ``eval_freq`` batches, :func:`evaluate` ``policy`` on ``eval_env`` for
    ``n_eval_episodes``; when the mean return beats the best so far, keep a copy of the
    policy's state dict (:attr:`best_state_dict`) and, with ``best_model_save_path``,
    write it to ``<path>/best_policy.pt`` (:func:`save_policy`). Logs SB3's names
    ``eval/mean_reward`` and ``eval/mean_ep_length`` (``"post_steps_log"``).

    Args:
        eval_env: the evaluation env (kept open; its seed is set once, from ``seed``).
        policy: the policy evaluated (and saved).
        eval_freq: batches between two evaluations.
        n_eval_episodes: episodes per evaluation.
        best_model_save_path: the folder of ``best_policy.pt`` (None: kept in memory).
        deterministic: evaluate under DETERMINISTIC (else RANDOM) exploration.
        seed: the eval env's seed, set before the first evaluation.

    Raises:
        TrainerError: a non-positive ``eval_freq`` or ``n_eval_episodes``.

    Examples:
        >>> import torch
        >>> from rl_envs import GymEnv
        >>> from tensordict.nn import TensorDictModule
        >>> env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
        >>> policy = TensorDictModule(lambda o: o[..., 2].gt(0).long(), ["observation"],
        ...                           ["action"])
        >>> callback = EvalCallback(env, torch.nn.Sequential(), eval_freq=1,
        ...                         n_eval_episodes=2, seed=0)
        >>> callback.policy_fn = policy  # what is run (the Sequential is what is saved)
        >>> logged = callback()
        >>> sorted(logged), callback.best_mean_reward == logged["eval/mean_reward"]
        (['eval/mean_ep_length', 'eval/mean_reward'], True)
        >>> env.close()
    """

    def __init__(self, eval_env: EnvBase, policy: nn.Module, *, eval_freq: int,
                 n_eval_episodes: int = 5, best_model_save_path: str | os.PathLike | None = None,
                 deterministic: bool = True, seed: int | None = None) -> None:
        for name, value in (("eval_freq", eval_freq), ("n_eval_episodes", n_eval_episodes)):
            if not isinstance(value, int) or value < 1:
                raise TrainerError(f"EvalCallback: {name} must be an int >= 1, received {value!r}")
        self.eval_env, self.policy, self.policy_fn = eval_env, policy, policy
        self.eval_freq, self.n_eval_episodes = eval_freq, n_eval_episodes
        self.best_model_save_path = best_model_save_path
        self.exploration_type = (ExplorationType.DETERMINISTIC if deterministic
                                 else ExplorationType.RANDOM)
        self.best_mean_reward = float("-inf")
        self.best_state_dict: dict[str, Any] | None = None
        self.last_result: EvalResult | None = None
        self.calls, self._seed = 0, seed

    def __call__(self, batch: Any = None) -> dict[str, float] | None:
        self.calls += 1
        if (self.calls - 1) % self.eval_freq:
            return None
        result = evaluate(self.policy_fn, self.eval_env, self.n_eval_episodes,
                          exploration_type=self.exploration_type, seed=self._seed)
        self._seed, self.last_result = None, result  # seeded once: later evals go on
        if result.mean_return > self.best_mean_reward:
            self.best_mean_reward = result.mean_return
            self.best_state_dict = copy.deepcopy(self.policy.state_dict())
            if self.best_model_save_path is not None:
                save_policy(self.policy, Path(self.best_model_save_path) / "best_policy.pt")
        return {"eval/mean_reward": result.mean_return,
                "eval/mean_ep_length": sum(result.lengths) / len(result.lengths)}

    def register(self, trainer: Trainer, name: str = "eval_callback") -> None:
        trainer.register_op("post_steps_log", self)
