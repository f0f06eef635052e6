"""The observation an env writes straight into a rollout's storage (issue 42): the env's
numpy views point at the step's slots (``("next", key)[t]`` and ``key[t + 1]``) while
:func:`~rl_envs.step_loop` runs, instead of the env's own buffers being copied in after the
step. :func:`moving_obs_source` says where an env can; ``docs/architecture.md`` says why
the batch keeps both stores and what the slots cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

from rl_envs._keys import NEXT
from rl_envs._writer import RolloutWriter

if TYPE_CHECKING:
    from rl_envs._env import EnvBase

__all__ = ["MovingObs", "moving_obs_source"]


class MovingObs:
    """An observation the env writes straight into a storage (issue 42's moving slots).

    At step ``t`` the env writes the simulator's array into ``("next", key)[t]`` and the
    root for ``t + 1`` (the rows of finished sub-envs reset) into ``key[t + 1]``, which
    the policy reads at ``t + 1``: two copies a step, where copying the env's own two
    buffers into the storage takes four. The last step's root goes to the env's own
    buffer (the next batch's first root; the policy reads it at step 0, which
    :meth:`first_root` copies into ``key[0]``). The env's numpy views point at the step's
    slots from :meth:`point` on, so a reset decided anywhere in the step (the env's
    autoreset, a transform's truncation) writes into the storage; :meth:`release` (the
    loop's ``finally``) puts the env's own back, so nothing outside the loop sees the
    slots. The policy's views of the slots (one ``unbind`` a storage) are made only when
    ``rebind`` is true (an actor that reads the observation). Built per storage by
    :func:`moving_obs_source`'s ``bind``.
    """

    __slots__ = ("env", "own", "key", "leaves", "home", "nxt", "root", "last", "views",
                 "obs_views", "storage", "rebind")

    def __init__(self, env: Any, key: str, leaves: dict, home: torch.Tensor,
                 nxt: np.ndarray, root: np.ndarray, storage: torch.Tensor) -> None:
        self.env, self.key, self.leaves, self.home = env, key, leaves, home
        self.storage, self.views = storage, None  # the policy's views: made on first use
        self.rebind = True  # False for an actor that never reads the policy input
        self.own = (env._nobs, env._robs, env._obs_views)
        if not env.batch_size:  # an unbatched env's [] slots, seen as gymnasium's [1] arrays
            nxt, root = nxt[:, None], root[:, None]
        self.nxt, self.root, self.last = nxt, root, len(root) - 1
        self.obs_views = [self.own[2][0]]  # the env's one (path, next, root) entry, moved

    def point(self, t: int) -> None:
        """Step ``t``: the policy reads slot ``t`` (at ``t = 0`` the env's own root, which
        :meth:`first_root` copies into slot 0 after the call), and the env writes the
        simulator's array into ``("next", key)[t]`` and the root for ``t + 1`` into
        ``key[t + 1]`` (the last step's into its own buffer). Its views stay there until
        the next step's, and :meth:`release` puts its own back."""
        env, root = self.env, self.root
        if t and self.rebind:
            views = self.views
            if views is None:
                views = self.views = self.storage.unbind(0)
            self.leaves[self.key] = views[t]
        nxt = self.nxt[t]
        ahead = root[t + 1] if t < self.last else self.own[1]
        env._nobs, env._robs = nxt, ahead
        self.obs_views[0] = ((), nxt, ahead)
        env._obs_views = self.obs_views

    def first_root(self) -> None:
        """After the policy's call at step 0: the env's own root (what it read) into slot 0."""
        self.root[0][...] = self.own[1]

    def release(self) -> None:
        """After a loop: the env's own views, and the policy input's observation the env's
        own root again."""
        env = self.env
        env._nobs, env._robs, env._obs_views = self.own
        self.leaves[self.key] = self.home


@dataclass
class _MovingSource:
    env: Any
    key: str
    leaves: dict
    home: torch.Tensor

    def bind(self, writer: RolloutWriter) -> MovingObs:
        """The :class:`MovingObs` of ``writer``'s storage (time-first numpy views)."""
        root = writer.array((self.key,))
        nxt = writer.array((NEXT, self.key))
        return MovingObs(self.env, self.key, self.leaves, self.home, nxt, root,
                         writer.slot(self.key))


def moving_obs_source(env: EnvBase, policy_input: TensorDictBase) -> _MovingSource | None:
    """What :class:`MovingObs` needs of ``env`` and the policy input, read once per layout,
    where the env can write its observation through slots that move: a ``GymWrapper``
    with one observation leaf on the CPU, alone or under a ``TransformedEnv`` whose
    transforms never read or write it (``StepCounter``, ``InitTracker``, ``RewardSum``),
    and a policy input whose observation is that env's root buffer itself. ``None``
    otherwise: the env's buffers are copied into the storage, as before."""
    from rl_envs._gym import GymWrapper
    from rl_envs._transforms import TransformedEnv, _walk
    from rl_envs._transforms_lib import InitTracker, RewardSum, StepCounter

    base = env
    if isinstance(env, TransformedEnv):
        blind = (InitTracker, RewardSum, StepCounter)
        if env._ext is not None or any(type(x) not in blind for x in _walk(env.transform)[1:]):
            return None
        base = env.base_env
    if not isinstance(base, GymWrapper) or type(base).fast_step is not GymWrapper.fast_step:
        return None
    root, _ = env.buffers()
    if base._nobs is None or base.device.type != "cpu" or type(policy_input) is not TensorDict:
        return None
    keys = [k for k in base.observation_spec.keys(True, True) if k not in base._info_keys]
    key = keys[0] if len(keys) == 1 else None
    if not isinstance(key, str) or policy_input.get(key, None) is not root.get(key):
        return None
    return _MovingSource(base, key, policy_input._tensordict, root.get(key))
