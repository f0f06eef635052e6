"""Atari transforms with TorchRL's names and meaning: ``NoopResetEnv`` and
``EndOfLifeTransform``, for single gymnasium ALE envs vectorised by ``GymEnv(...,
vectorization_mode="sync")``.

ALE's own C++ vector env (``GymEnv("ALE/Breakout-v5")``) does both itself, faster: pass
``noop_max=30`` (its default) and read the lives with ``info_keys=["lives"]``;
``EndOfLifeTransform`` works on it too through that key.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._gym import GymWrapper
from rl_envs._gym_autoreset import leaf
from rl_envs._keys import DONE
from rl_envs._specs import Unbounded
from rl_envs._transforms import Transform
from rl_envs._transforms_lib import new_leaf

__all__ = ["EndOfLifeTransform", "NoopResetEnv"]

END_OF_LIFE = "end-of-life"
"""Written by ``EndOfLifeTransform`` under ``"next"``: ``done`` or a life was lost."""
LIVES = "lives"
"""Lives left (ALE's ``info["lives"]``), read or written by ``EndOfLifeTransform``."""
_MAX_TRIALS = 10


def _sync_sub_envs(transform: Transform) -> tuple[GymWrapper, list]:
    """The base ``GymWrapper`` of ``transform``'s env and its sub-envs (a sync vector env)."""
    import gymnasium as gym

    name = type(transform).__name__
    owner = transform._owner
    base = owner.base_env if owner is not None else None
    if not isinstance(base, GymWrapper):
        got = type(base).__name__
        raise TypeError(f"{name}: the base env must be a GymWrapper/GymEnv, received {got}")
    venv = base.env.unwrapped
    if not isinstance(venv, gym.vector.SyncVectorEnv):
        raise TypeError(
            f"{name}: needs GymEnv(..., vectorization_mode='sync') (it reaches each sub-env), "
            f"received a {type(venv).__name__}; ALE's own vector env has noop_max and "
            "episodic_life options, and its lives come with info_keys=['lives']"
        )
    return base, list(venv.envs)


class NoopResetEnv(Transform):
    """After each reset, every resetting sub-env takes a random number of no-op steps.

    The DQN start-state randomisation: a sub-env that resets (at ``reset()`` or when its
    episode ends during a rollout) takes ``k`` steps of action 0 (ALE's ``NOOP``), ``k``
    drawn uniformly in ``[0, noops]`` (``random=True``) or always ``noops``. Those steps
    are not in the data: the root holds the observation after them. A sub-env whose
    episode ends during its no-ops is reset and tries again.

    Only the resetting sub-envs step (one Python call per no-op of a resetting sub-env,
    as few as the env allows); the transform must come first in the chain, on a
    ``GymEnv(..., vectorization_mode="sync")``. The draws use the env's generator
    (``env.set_seed``).

    Args:
        noops: the largest (``random``) or the exact number of no-op steps.
        random: draw the number per reset (TorchRL's default) or always take ``noops``.

    Raises:
        ValueError: ``noops`` is not an int >= 1, the transform is not the first one, or
            action 0 is not ``NOOP``.
        TypeError: the base env is not a sync ``GymEnv``.
        RuntimeError: a sub-env ended during its no-ops ``10`` times in a row.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> base = GymEnv("ALE/Pong-v5", num_envs=2, vectorization_mode="sync")
        >>> env = TransformedEnv(base, NoopResetEnv(noops=5, random=False))
        >>> _ = env.reset()
        >>> base.env.envs[0].unwrapped.ale.getEpisodeFrameNumber()  # 5 no-ops of 4 frames
        20
        >>> env.close()
    """

    def __init__(self, noops: int = 30, random: bool = True):
        if isinstance(noops, bool) or not isinstance(noops, int) or noops < 1:
            raise ValueError(f"NoopResetEnv: noops must be an int >= 1, received {noops!r}")
        super().__init__()
        self.noops = noops
        self.random = bool(random)

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        base, envs = _sync_sub_envs(self)
        if self._owner.transform.transforms[0] is not self:
            raise ValueError(
                "NoopResetEnv: must be the first transform (it rewrites the base observation)"
            )
        meanings = getattr(envs[0].unwrapped, "get_action_meanings", None)
        if meanings is not None and meanings()[0] != "NOOP":
            raise ValueError(f"NoopResetEnv: action 0 must be NOOP, received {meanings()[0]!r}")
        self._base, self._envs = base, envs
        self._done = next.get(DONE).numpy().reshape(-1)
        return root, next

    def _counts(self, n: int) -> np.ndarray:
        if not self.random:
            return np.full(n, self.noops)
        return torch.randint(0, self.noops + 1, (n,), generator=self._base._rng).numpy()

    def _noop(self, rows: np.ndarray) -> None:
        views = self._base._obs_views
        for i, k in zip(rows.tolist(), self._counts(len(rows)).tolist(), strict=True):
            obs = self._run(self._envs[i], k)
            if obs is not None:
                for path, _, rv in views:
                    rv[i] = leaf(obs, path)

    def _run(self, env: Any, k: int) -> Any:
        """``k`` no-op steps of one sub-env; its last observation (None when ``k == 0``)."""
        obs = None
        for _ in range(_MAX_TRIALS):
            for _ in range(k):
                obs, _, term, trunc, _ = env.step(0)
                if term or trunc:
                    obs, _ = env.reset()
                    break
            else:
                return obs
        raise RuntimeError(
            f"NoopResetEnv: a sub-env ended during its no-op steps {_MAX_TRIALS} times in a "
            f"row; noops={self.noops} is too large for this env"
        )

    def on_reset(self, mask: torch.Tensor | None) -> None:
        rows = np.arange(len(self._envs)) if mask is None else np.flatnonzero(mask.numpy())
        self._noop(rows)

    def on_step(self) -> None:
        if np.count_nonzero(self._done):  # finished sub-envs were just reset by the env
            self._noop(np.flatnonzero(self._done))
        return None

    def __repr__(self) -> str:
        return f"NoopResetEnv(noops={self.noops}, random={self.random})"


class EndOfLifeTransform(Transform):
    """Write ``("next", "end-of-life")``: ``done``, or a life was lost on this step.

    A training-only done signal (DeepMind's DQN trick): the episode goes on after a life
    loss (no reset, ``done`` and the episode return unchanged), but a loss that reads
    ``"end-of-life"`` as its done/terminated key does not bootstrap across it
    (:meth:`register_keys` sets that). The key is in the done spec (root: always False).

    The lives are read from the ``lives_key`` entry when the env has it, vectorised
    (``GymEnv(..., info_keys=["lives"])``, ALE's vector env included), else from
    ``eol_attribute`` of each sub-env of a sync ``GymEnv`` (one call per sub-env and step),
    and then written under ``lives_key`` (``[*B]``, int64).

    Args:
        eol_key: where the end-of-life signal is written.
        lives_key: the lives entry (read, or written).
        done_key: the done key it extends.
        eol_attribute: dotted path of the lives on a sub-env (a value or a callable).

    Examples:
        >>> from rl_envs import GymEnv, RewardSum, TransformedEnv
        >>> base = GymEnv("ALE/Breakout-v5", num_envs=2, info_keys=["lives"])
        >>> env = TransformedEnv(base, EndOfLifeTransform())
        >>> data = env.rollout(200, break_when_any_done=False)
        >>> lost = data["next", "lives"] < data["lives"]
        >>> eol, done = data["next", "end-of-life"][..., 0], data["next", "done"][..., 0]
        >>> bool((eol == (lost | done)).all())
        True
        >>> env.close()
    """

    def __init__(
        self,
        eol_key: str = END_OF_LIFE,
        lives_key: str = LIVES,
        done_key: str = DONE,
        eol_attribute: str = "unwrapped.ale.lives",
    ):
        super().__init__([done_key], [eol_key])
        self.eol_key, self.lives_key, self.done_key = eol_key, lives_key, done_key
        self.eol_attribute = eol_attribute
        self._from_attr = False

    def transform_done_spec(self, spec: Composite) -> Composite:
        spec[self.eol_key] = spec[self.done_key].clone()
        return spec

    def transform_observation_spec(self, spec: Composite) -> Composite:
        self._from_attr = self.lives_key not in spec.keys(True, True)
        if self._from_attr:
            spec[self.lives_key] = Unbounded(spec.shape, spec.device, torch.int64)
            return spec
        dtype = spec[self.lives_key].dtype
        if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            raise TypeError(
                f"EndOfLifeTransform: {self.lives_key!r} must be an integer count, "
                f"received {dtype}"
            )
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        done = next.get(self.done_key)
        eol_spec = Unbounded(done.shape, done.device, torch.bool)
        root, _ = new_leaf(root, self.eol_key, eol_spec)
        next, eol = new_leaf(next, self.eol_key, eol_spec)
        if self._from_attr:
            _, envs = _sync_sub_envs(self)
            self._getters = [self._getter(e) for e in envs]
            lives_spec = Unbounded(root.batch_size, root.device, torch.int64)
            root, _ = new_leaf(root, self.lives_key, lives_spec)
            next, _ = new_leaf(next, self.lives_key, lives_spec)
        n = root.batch_size.numel()
        self._root_lives = root.get(self.lives_key).numpy().reshape(n)
        self._next_lives = next.get(self.lives_key).numpy().reshape(n)
        self._done, self._eol = done.numpy().reshape(n), eol.numpy().reshape(n)
        self._prev = np.zeros(n, dtype=np.int64)
        return root, next

    def _getter(self, env: Any) -> Any:
        obj = env
        for name in self.eol_attribute.split("."):
            if not hasattr(obj, name):
                raise AttributeError(
                    f"EndOfLifeTransform: eol_attribute={self.eol_attribute!r}: "
                    f"{type(obj).__name__} has no attribute {name!r}"
                )
            obj = getattr(obj, name)
        return obj if callable(obj) else (lambda: obj)

    def _read_attr(self) -> None:
        lives = np.fromiter((g() for g in self._getters), np.int64, len(self._getters))
        self._root_lives[:] = lives
        self._next_lives[:] = lives

    def on_reset(self, mask: torch.Tensor | None) -> None:
        if self._from_attr:
            self._read_attr()
        rows = slice(None) if mask is None else mask.numpy().reshape(-1)
        self._prev[rows] = self._root_lives[rows]

    def on_step(self) -> None:
        if self._from_attr:
            self._read_attr()
        np.less(self._next_lives, self._prev, out=self._eol)
        self._eol |= self._done
        self._prev[:] = self._root_lives  # a finished sub-env: its reset's lives
        return None

    def register_keys(self, loss_or_advantage: Any) -> Any:
        """Make a loss or value estimator read ``eol_key`` as its done/terminated key.

        Returns:
            ``loss_or_advantage`` (its ``set_keys`` result).
        """
        fields = getattr(loss_or_advantage, "tensor_keys", None)
        roles = [r for r in ("done", "terminated") if hasattr(fields, r)]
        if not roles:
            raise TypeError(
                "EndOfLifeTransform.register_keys: expected a module with set_keys and "
                f"done/terminated keys, received {type(loss_or_advantage).__name__}"
            )
        return loss_or_advantage.set_keys(**dict.fromkeys(roles, self.eol_key))

    def __repr__(self) -> str:
        return f"EndOfLifeTransform(eol_key={self.eol_key!r}, lives_key={self.lives_key!r})"
