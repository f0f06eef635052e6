"""``evaluate``: per-episode returns and lengths of a policy on an env (SB3's
``evaluate_policy``, on our envs, under TorchRL's exploration types); ``record_video``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from rl_envs import EnvBase, TransformedEnv
from rl_envs.exceptions import SpecError
from rl_modules import ExplorationType, set_exploration_type
from rl_record import Logger, PixelRenderTransform, VideoRecorder
from tensordict import TensorDictBase

from rl_trainers.exceptions import EvaluationError

__all__ = ["EvalResult", "evaluate", "record_video"]


@dataclasses.dataclass
class EvalResult:
    """What :func:`evaluate` measured.

    Attributes:
        returns: each episode's undiscounted return, in the order the episodes ended.
        lengths: each episode's number of steps.
    """

    returns: list[float]
    lengths: list[int]

    @property
    def mean_return(self) -> float:
        """The mean of :attr:`returns`."""
        return sum(self.returns) / len(self.returns)

    @property
    def std_return(self) -> float:
        """The population standard deviation of :attr:`returns` (SB3's)."""
        mean = self.mean_return
        return math.sqrt(sum((r - mean) ** 2 for r in self.returns) / len(self.returns))


def _targets(episodes: int, num_envs: int) -> list[int]:
    """Episodes each sub-env contributes (SB3's rule: spread evenly, the first get more)."""
    return [(episodes + i) // num_envs for i in range(num_envs)]


def _act(policy: Any, env: EnvBase, td: TensorDictBase) -> TensorDictBase:
    out = policy(td)
    td = out if isinstance(out, TensorDictBase) else td
    if env.action_key not in td.keys(True, True):
        raise EvaluationError(
            f"evaluate: expected the policy to write the env's action key {env.action_key!r}, "
            f"received keys {sorted(map(str, td.keys(True, True)))}"
        )
    try:
        env.validate_action(td.get(env.action_key))
    except SpecError as err:
        action = td.get(env.action_key)
        raise EvaluationError(
            f"evaluate: the policy's action does not fit env.action_spec "
            f"({type(env.action_spec).__name__} of shape {tuple(env.action_spec.shape)}, "
            f"{env.action_spec.dtype}); received {action.dtype} of shape "
            f"{tuple(action.shape)}: {err}"
        ) from err
    return td


def evaluate(policy: Any, env: EnvBase, episodes: int = 10, *,
             exploration_type: Any = ExplorationType.DETERMINISTIC, seed: int | None = None,
             max_steps: int = 100_000) -> EvalResult:
    """Run ``policy`` on ``env`` until ``episodes`` episodes ended; their returns and lengths.

    A vector env's sub-envs share the episodes as SB3's ``evaluate_policy`` does (sub-env
    ``i`` contributes ``(episodes + i) // num_envs``, so short episodes do not crowd out
    long ones). The first action is checked against ``env.action_spec``.

    Args:
        policy: a ``td -> td`` callable writing the env's action key (actors, TorchRL's
            modules); run under ``torch.no_grad``.
        env: the env (left open; reset at the start).
        episodes: how many episodes to measure.
        exploration_type: TorchRL's ``ExplorationType`` to run under (DETERMINISTIC: the
            distribution's mode, exploration modules inert).
        seed: ``env.set_seed(seed)`` first, for repeatable episodes.
        max_steps: a bound on env steps (an error when reached).

    Returns:
        An :class:`EvalResult`.

    Raises:
        EvaluationError: ``episodes`` < 1, an action that does not fit the env's action
            spec, or ``max_steps`` steps without the episodes ending.

    Examples:
        >>> from rl_envs import GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
        >>> policy = lambda td: td.set("action", td["observation"][..., 2].gt(0).long())
        >>> result = evaluate(policy, env, episodes=4, seed=0)
        >>> len(result.returns), result.mean_return > 20
        (4, True)
        >>> env.close()
    """
    if not isinstance(episodes, int) or episodes < 1:
        raise EvaluationError(f"evaluate: episodes must be an int >= 1, received {episodes!r}")
    if seed is not None:
        env.set_seed(seed)
    n = max(1, math.prod(env.batch_size))
    targets, counts = _targets(episodes, n), [0] * n
    returns, lengths = [], []
    total, length = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.long)
    with torch.no_grad(), set_exploration_type(exploration_type):
        td = _act(policy, env, env.reset())
        for _ in range(max_steps):
            td, root = env.step_and_maybe_reset(td)
            total += td.get(("next", env.reward_key)).reshape(n).double()
            length += 1
            for i in td.get(("next", "done")).reshape(n).nonzero().flatten().tolist():
                if counts[i] < targets[i]:
                    returns.append(float(total[i]))
                    lengths.append(int(length[i]))
                    counts[i] += 1
                total[i], length[i] = 0.0, 0
            if counts == targets:
                return EvalResult(returns, lengths)
            out = policy(root)
            td = out if isinstance(out, TensorDictBase) else root
    raise EvaluationError(
        f"evaluate: expected {episodes} episodes to end within max_steps={max_steps} env "
        f"steps, received {len(returns)}"
    )


def record_video(policy: Any, env: TransformedEnv, logger: Logger, *,
                 tag: str = "eval/video", step: int | None = None,
                 exploration_type: Any = ExplorationType.DETERMINISTIC,
                 seed: int | None = None, fps: int | None = None) -> EvalResult:
    """Record one evaluation episode of ``policy`` to ``logger`` as a video.

    Appends ``PixelRenderTransform`` and ``VideoRecorder`` to ``env`` (which must render
    arrays: ``GymEnv(..., num_envs=1, render_mode="rgb_array")`` under the training
    transforms), runs :func:`evaluate` for one episode and logs the frames.

    Args:
        policy: as for :func:`evaluate`.
        env: a one-sub-env ``TransformedEnv`` built with ``render_mode="rgb_array"``.
        logger: where the video goes (``log_video(tag, ...)``).
        tag: the video's name.
        step: the logger step of the video (default: the recorder's count).
        exploration_type: as for :func:`evaluate`.
        seed: as for :func:`evaluate`.
        fps: frames per second (default: the logger's).

    Returns:
        The episode's :class:`EvalResult`.

    Raises:
        EvaluationError: ``env`` is not a ``TransformedEnv``.
    """
    if not isinstance(env, TransformedEnv):
        raise EvaluationError(
            f"record_video: env must be a TransformedEnv, received {type(env).__name__}"
        )
    recorder = VideoRecorder(logger, tag=tag, fps=fps)
    if step is not None:
        recorder.count = step
    env.append_transform(PixelRenderTransform())
    env.append_transform(recorder)
    result = evaluate(policy, env, episodes=1, exploration_type=exploration_type, seed=seed)
    recorder.dump()
    return result
