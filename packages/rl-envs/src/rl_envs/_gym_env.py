"""``GymEnv``: a gymnasium env built by name (``gym.make_vec``) behind :class:`GymWrapper`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_envs._gym import GymWrapper
from rl_envs._gym_make import make_vector_env
from rl_envs._gym_pixels import PIXELS, pixel_wrapper
from rl_envs._specs import TensorSpec

__all__ = ["GymEnv"]


class GymEnv(GymWrapper):
    """Build ``gym.make_vec(env_name, num_envs, ...)`` and wrap it.

    Args:
        env_name: a registered gymnasium id, e.g. ``"CartPole-v1"``; ``"ALE/..."`` ids
            import ``ale_py`` (the ``[atari]`` extra) on first use.
        num_envs: ``None`` (default): one env, batch size ``()`` as TorchRL's; an int:
            that many sub-envs, batch size ``(num_envs,)`` (``1`` gives ``(1,)``).
        vectorization_mode: ``None`` (default): gymnasium's own choice, the env's vector
            entry point where it registers one (CartPole's numpy env, ALE's C++ vector
            env), else ``"sync"``; ``"sync"`` when ``vector_kwargs`` are given, and
            ``"sync"`` too when that vector env cannot report final observations.
            Explicit choices: ``"sync"`` (a Python loop over sub-envs), ``"async"`` (one
            subprocess per sub-env, spawn context; ``close()`` ends them) or
            ``"vector_entry_point"`` (raises for an env that has none). The mode used is
            in :attr:`vectorization_mode`.
        vector_kwargs: extra arguments of the sync/async vector env. By default it
            autoresets in ``SAME_STEP`` mode and does not copy observations (they are
            copied into our buffers anyway).
        **kwargs: passed to the env constructor (``gym.make_vec(..., **kwargs)``); with a
            vector entry point, to the vector env (ALE: ``grayscale``, ``img_height``,
            ``stack_num``, ``noop_max``, ``episodic_life``, ``frameskip``, ...). A vector
            entry point that takes ``autoreset_mode`` gets ``SAME_STEP`` unless given.
        categorical_action_encoding: passed to :class:`GymWrapper`: ``Discrete`` actions as
            integers when True, one-hot when False (default, as TorchRL).
        frame_skip: passed to :class:`GymWrapper`: repeat each action this many times
            (the last observation, the rewards summed), as TorchRL's ``frame_skip``.
        from_pixels: render each step (``render_mode="rgb_array"`` is set) and return the
            frame, uint8 ``[*B, H, W, 3]``, under ``"pixels"``, as TorchRL's; the mode is
            ``"sync"`` unless ``"async"`` is asked for (each sub-env is wrapped).
        pixels_only: with ``from_pixels``, only ``"pixels"`` (default ``False``: the state
            stays under ``"observation"``, TorchRL's default).
        info_keys: passed to :class:`GymWrapper`: info entries exported as observations.
        device: passed to :class:`GymWrapper`: must be CPU.

    ``GymWrapper``'s ``partial_reset`` is not taken: it is detected from the vector env.

    Raises:
        ValueError: ``num_envs`` neither ``None`` nor an int >= 1, an unknown
            ``vectorization_mode``, or ``from_pixels`` with ``"vector_entry_point"`` or
            another ``render_mode``.
        ImportError: an ``"ALE/..."`` id without ``ale_py`` installed.

    Examples:
        >>> env = GymEnv("CartPole-v1", num_envs=4)
        >>> env.vectorization_mode
        'vector_entry_point'
        >>> env.set_seed(0)
        4
        >>> data = env.rollout(10)
        >>> data["next", "observation"].shape[:1]
        torch.Size([4])
        >>> env.action_spec.shape  # one-hot by default, as TorchRL
        torch.Size([4, 2])
        >>> env.close()
        >>> GymEnv("CartPole-v1", categorical_action_encoding=True).action_spec.shape
        torch.Size([])
        >>> GymEnv("Acrobot-v1", num_envs=2).vectorization_mode
        'sync'
        >>> env = GymEnv("CartPole-v1", from_pixels=True, pixels_only=True)
        >>> pixels = env.observation_spec["pixels"]
        >>> env.batch_size, pixels.shape, pixels.dtype
        (torch.Size([]), torch.Size([400, 600, 3]), torch.uint8)
        >>> env.close()
    """

    def __init__(
        self,
        env_name: str,
        num_envs: int | None = None,
        *,
        vectorization_mode: str | None = None,
        vector_kwargs: Mapping[str, Any] | None = None,
        categorical_action_encoding: bool = False,
        frame_skip: int = 1,
        info_keys: Sequence[str] | Mapping[str, TensorSpec] | None = None,
        device: Any = None,
        from_pixels: bool = False,
        pixels_only: bool = False,
        **kwargs: Any,
    ):
        if num_envs is not None and (not isinstance(num_envs, int) or num_envs < 1):
            raise ValueError(
                f"GymEnv: num_envs must be None (one env, batch []) or an int >= 1, "
                f"received {num_envs!r}"
            )
        wrappers = None
        if from_pixels:
            kwargs = {"render_mode": "rgb_array", **kwargs}
            wrappers = [pixel_wrapper(pixels_only)]
        venv, mode = make_vector_env(
            env_name, num_envs or 1, vectorization_mode, vector_kwargs, kwargs, wrappers
        )
        self.env_name = env_name
        self.vectorization_mode = mode
        try:
            super().__init__(
                venv,
                unbatched=num_envs is None,
                categorical_action_encoding=categorical_action_encoding,
                frame_skip=frame_skip,
                info_keys=info_keys,
                device=device,
                obs_key=PIXELS if from_pixels and pixels_only else None,
            )
        except BaseException:
            venv.close()
            raise

    def _num_envs_arg(self) -> int | None:
        return self.batch_size[0] if self.batch_size else None

    def __repr__(self) -> str:
        return (
            f"GymEnv({self.env_name!r}, num_envs={self._num_envs_arg()}, "
            f"vectorization_mode={self.vectorization_mode!r}, "
            f"autoreset_mode={self.autoreset_mode.value})"
        )
