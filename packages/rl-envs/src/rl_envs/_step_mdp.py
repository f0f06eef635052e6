"""``step_mdp`` and ``EnvCreator``: TorchRL's helpers for hand-written loops and workers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tensordict import TensorDictBase

from rl_envs._keys import ACTION, DONE_KEYS, NEXT, REWARD

__all__ = ["EnvCreator", "step_mdp"]


def _keys(keys: Any) -> list[Any]:
    return [keys] if isinstance(keys, (str, tuple)) else list(keys)


def step_mdp(
    tensordict: TensorDictBase,
    next_tensordict: TensorDictBase | None = None,
    keep_other: bool = True,
    exclude_reward: bool = True,
    exclude_done: bool = False,
    exclude_action: bool = True,
    reward_keys: Any = REWARD,
    done_keys: Any = None,
    action_keys: Any = ACTION,
) -> TensorDictBase:
    """The root of the next step: ``tensordict["next"]`` moved to the root (TorchRL's
    ``step_mdp``).

    Keys under ``"next"`` become root keys (reward excluded by default, done flags kept);
    with ``keep_other`` the root keys that ``"next"`` does not hold are kept too, except
    the action keys (by default). The input is not modified; leaves are shared, not copied.

    Args:
        tensordict: a step's output (root keys plus ``"next"``).
        next_tensordict: when given, the result is written into it (in place) and returned.
        keep_other: keep the root keys that ``"next"`` does not override.
        exclude_reward: drop the reward keys.
        exclude_done: drop the done keys (``done``, ``terminated``, ``truncated``).
        exclude_action: drop the action keys from the kept root keys.
        reward_keys: the reward key(s).
        done_keys: the done key(s) (default: ``done``, ``terminated``, ``truncated``).
        action_keys: the action key(s).

    Returns:
        The TensorDict of the next step's root.

    Raises:
        KeyError: ``tensordict`` has no ``"next"`` entry.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict(observation=torch.zeros(2), action=torch.ones(2),
        ...                 next=TensorDict(observation=torch.ones(2), reward=torch.ones(2),
        ...                                 done=torch.zeros(2, dtype=torch.bool)))
        >>> sorted(step_mdp(td).keys())
        ['done', 'observation']
    """
    if NEXT not in tensordict:
        raise KeyError(
            f"step_mdp: tensordict must hold a 'next' entry (a step's output), received keys "
            f"{sorted(map(str, tensordict.keys()))}"
        )
    drop: list[Any] = []
    if exclude_reward:
        drop += _keys(reward_keys)
    if exclude_done:
        drop += _keys(list(DONE_KEYS) if done_keys is None else done_keys)
    nxt = tensordict.get(NEXT)
    out = nxt.exclude(*drop) if drop else nxt.copy()
    if keep_other:
        root = tensordict.exclude(NEXT, *(_keys(action_keys) if exclude_action else []), *drop)
        for key, value in root.items():
            if key not in out:
                out.set(key, value)
    if next_tensordict is not None:
        next_tensordict.update(out)
        return next_tensordict
    return out


class EnvCreator:
    """A picklable env factory: ``EnvCreator(fn)()`` builds ``fn(**create_env_kwargs)``
    (TorchRL's ``EnvCreator``, same call).

    Pass it wherever an env constructor goes (``ParallelEnv``, collectors): workers call
    it to build their env. Unlike TorchRL's, it does not build an env at construction to
    share transform statistics; ``VecNorm``/``NormalizeReward`` share theirs across workers
    themselves.

    Args:
        create_env_fn: a callable returning an ``EnvBase``.
        create_env_kwargs: keyword arguments passed to it on every call.

    Raises:
        TypeError: ``create_env_fn`` is not callable, or ``create_env_kwargs`` not a mapping.

    Examples:
        >>> from rl_envs import GymEnv
        >>> make = EnvCreator(GymEnv, {"env_name": "CartPole-v1", "num_envs": 2})
        >>> env = make()
        >>> env.batch_size
        torch.Size([2])
        >>> env.close()
    """

    def __init__(
        self,
        create_env_fn: Callable[..., Any],
        create_env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(create_env_fn):
            raise TypeError(
                f"EnvCreator: create_env_fn must be callable, received "
                f"{type(create_env_fn).__name__}"
            )
        if create_env_kwargs is not None and not isinstance(create_env_kwargs, Mapping):
            raise TypeError(
                f"EnvCreator: create_env_kwargs must be a mapping, received "
                f"{type(create_env_kwargs).__name__}"
            )
        self.create_env_fn = create_env_fn
        self.create_env_kwargs = dict(create_env_kwargs or {})

    def __call__(self, **kwargs: Any) -> Any:
        return self.create_env_fn(**{**self.create_env_kwargs, **kwargs})

    def __repr__(self) -> str:
        return f"EnvCreator({self.create_env_fn!r}, {self.create_env_kwargs!r})"

