"""``EnvBase``: batched environments with a TorchRL-style public API and a collector fast path."""

from __future__ import annotations

from typing import Any

import torch
from rl_profiling import profiled
from tensordict import TensorDict, TensorDictBase

from rl_envs._action_check import check_action
from rl_envs._buffers import batch_mask, merge_reset, set_next, zero_buffers
from rl_envs._composite import Composite
from rl_envs._env_specs import EnvSpecSurface
from rl_envs._keys import DONE, DONE_KEYS, NEXT, RESET, REWARD
from rl_envs._policy import device_cast
from rl_envs._resets import reset_where
from rl_envs._rollout import run_rollout
from rl_envs._simple_pair import fast_reset_from_simple, fast_step_from_simple
from rl_envs._specs import Unbounded
from rl_envs._specs_discrete import Categorical
from rl_envs.exceptions import EnvClosedError, InvalidActionError

__all__ = ["EnvBase"]

ACTION_CHECK_STEPS = 8
"""Number of first steps on which the action's values are checked against the spec."""


class EnvBase(EnvSpecSurface):
    """Base class of batched environments.

    Specs (attributes, all with the batch shape ``batch_size`` in front):
    ``observation_spec`` (Composite), ``action_spec`` (leaf; ``full_action_spec`` is the
    Composite), ``reward_spec`` (``[*B, 1]``), ``done_spec`` (Composite of ``done``,
    ``terminated``, ``truncated``, each ``[*B, 1]`` bool) and ``state_spec`` (Composite of
    extra root inputs, often empty).

    Public API (TorchRL names): ``reset(td=None)`` (a ``"_reset"`` mask resets a subset),
    ``step(td)`` (writes the results under ``"next"``), ``step_and_maybe_reset(td)``
    (returns ``(td, next_root)`` and resets only the finished sub-envs), ``rollout``,
    ``rand_action``, ``rand_step``, ``set_seed``, ``fake_tensordict``, ``close`` and
    context-manager use; TorchRL's spec surface (``input_spec``, ``output_spec``,
    ``full_observation_spec``, ``full_state_spec``, ``observation_keys``, ``reward_keys``,
    ``state_keys``, ...) from :class:`~rl_envs._env_specs.EnvSpecSurface`.

    **Writing an env.** Implement *one* of two pairs of methods:

    - the simple pair (TorchRL style): ``_reset(td_or_None) -> TensorDict`` returning the
      observation keys (and optionally done flags) for every sub-env selected by
      ``td["_reset"]`` (all when ``td`` is ``None``), and ``_step(td) -> TensorDict``
      returning the observation keys, ``reward`` and any of ``done``/``terminated``/
      ``truncated`` (the missing ones are completed, ``done = terminated | truncated``).
      The fast path is then derived from them (correct, not the fastest).
    - the fast pair, public: the collector contract (typed as :class:`FastPathEnv`), no
      TensorDict built per step:

      * ``fast_reset(reset_mask=None) -> root``: reset every sub-env (``None``) or those
        where the bool ``[*B]`` mask is set; write their root entries (observation and
        state keys, done flags set to ``False``) **in place** into the env-owned buffer
        ``root`` and return it. Rows outside the mask are left untouched.
      * ``fast_step(action) -> (next, root)``: ``action`` is the tensor at
        ``action_key`` (or a TensorDict holding the action keys). Step every sub-env and
        write, in place, the real step results into ``next`` (observation keys,
        ``reward``, ``done``, ``terminated``, ``truncated``; on a finished sub-env the
        observation is the real final one) and the root of the following step into
        ``root``: the observation itself, except for the finished sub-envs, which are
        reset and hold their reset observation. No spurious reset step appears.

      ``next`` and ``root`` are the *same* TensorDict objects on every call; their leaves
      are never replaced, only written in place, so a caller may cache the leaves once
      and copy from them after each call. They are valid until the next fast call.
      Call ``self.validate_action(action)`` first (cheap shape/dtype check always, value
      check on the first ``action_checks_left`` steps) and get the buffers from
      ``self.buffers()``.

    **Batched envs over sub-envs** (``SerialEnv``/``ParallelEnv``) bind each sub-env to
    its row of their buffers (``sub_env.bind_buffers(root[i], next[i])``); no copy.

    Args:
        batch_size: the batch shape of the env (e.g. ``(num_envs,)``).
        device: device of the tensors the env reads and writes.

    Attributes:
        action_checks_left: how many more steps check the action's values against the
            spec (``ACTION_CHECK_STEPS`` at first; shape and dtype are always checked). A
            driver whose actions are checked already sets it to 0.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_envs import Categorical, Composite, EnvBase, Unbounded
        >>> class Counter(EnvBase):
        ...     def __init__(self):
        ...         super().__init__(batch_size=(2,))
        ...         self.observation_spec = Composite(observation=Unbounded((2, 1)), shape=(2,))
        ...         self.action_spec = Categorical(2, shape=(2,))
        ...         self.count = torch.zeros(2, 1)
        ...     def _reset(self, td):
        ...         mask = torch.ones(2, 1, dtype=torch.bool) if td is None else td["_reset"]
        ...         self.count[mask] = 0.0
        ...         return TensorDict(observation=self.count.clone(), batch_size=(2,))
        ...     def _step(self, td):
        ...         self.count += td["action"].unsqueeze(-1)
        ...         done = self.count >= 3
        ...         return TensorDict(observation=self.count.clone(), reward=self.count.clone(),
        ...                           terminated=done, batch_size=(2,))
        >>> env = Counter()
        >>> data = env.rollout(5, break_when_any_done=False)
        >>> data.batch_size
        torch.Size([2, 5])
        >>> sorted(data["next"].keys())
        ['done', 'observation', 'reward', 'terminated', 'truncated']
    """

    def __init__(self, *, batch_size: Any = (), device: Any = None):
        self.batch_size = torch.Size(batch_size)
        self.device = torch.device("cpu") if device is None else torch.device(device)
        b = self.batch_size
        self.observation_spec = Composite(shape=b, device=self.device)
        self.state_spec = Composite(shape=b, device=self.device)
        self.full_action_spec = Composite(shape=b, device=self.device)
        self.full_reward_spec = Composite(
            {REWARD: Unbounded((*b, 1), self.device)}, shape=b, device=self.device
        )
        self.full_done_spec = Composite(
            {k: Categorical(2, (*b, 1), self.device, torch.bool) for k in DONE_KEYS},
            shape=b,
            device=self.device,
        )
        self._root_buf: TensorDictBase | None = None
        self._next_buf: TensorDictBase | None = None
        self._pending: torch.Tensor | None = None
        self._has_reset = False
        self._closed = False
        self.action_checks_left = ACTION_CHECK_STEPS
        self._rng = torch.Generator(device=self.device)
        self._rng.seed()
        cls = type(self)
        if cls.fast_step is EnvBase.fast_step and cls._step is EnvBase._step:
            raise TypeError(f"{cls.__name__} must implement _step/_reset or fast_step/fast_reset")

    # -- the fast path ------------------------------------------------------------------
    def buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        """The env-owned ``(root, next)`` buffers, built from the specs on first use."""
        if self._root_buf is None or self._next_buf is None:
            self.bind_buffers(*zero_buffers(self))
        return self._root_buf, self._next_buf  # type: ignore[return-value]

    def bind_buffers(self, root: TensorDictBase, next: TensorDictBase) -> None:
        """Make the fast path write into ``root``/``next`` (e.g. slices of a batched env's
        shared-memory buffers). They must hold the keys, shapes and dtypes of the specs."""
        self._root_buf, self._next_buf = root, next
        self._on_buffers_bound()

    def _on_buffers_bound(self) -> None:
        """Hook: subclasses that cache views of the buffers rebuild them here."""

    def validate_action(self, action: Any) -> None:
        """Raise :class:`InvalidActionError` naming the key when ``action`` breaks the spec.

        Shape and dtype are checked on every call; values (bounds, categories) on the
        first ``ACTION_CHECK_STEPS`` calls. Nothing is ever cast silently.
        """
        check_action(self, action)

    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        """Reset all (or the masked) sub-envs into the root buffer; see the class docstring."""
        return fast_reset_from_simple(self, reset_mask)

    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        """Step every sub-env into the buffers and reset the finished ones; see the class
        docstring."""
        return fast_step_from_simple(self, action)

    # -- the simple pair (defaults raise) -----------------------------------------------
    def _reset(self, tensordict: TensorDictBase | None) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} implements the fast pair only")

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        raise NotImplementedError(f"{type(self).__name__} implements the fast pair only")

    def _set_seed(self, seed: int | None) -> None:
        """Hook: seed the backend. The env's own generator is already seeded."""

    def _close(self) -> None:
        """Hook: release the backend's resources."""

    # -- public API ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise EnvClosedError(f"{type(self).__name__} is closed")

    def fake_tensordict(self) -> TensorDictBase:
        """A zero TensorDict with every root key (action included) and the ``"next"`` keys."""
        td, nxt = zero_buffers(self)
        td.update(self.full_action_spec.zero())
        td.set(NEXT, nxt)
        return td

    @profiled("EnvBase.reset")
    def reset(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Reset every sub-env, or those selected by ``tensordict["_reset"]``.

        Returns a new TensorDict holding the root entries (observations, done flags set to
        ``False``); on a partial reset the other sub-envs keep the values of ``tensordict``.
        """
        self._check_open()
        mask = None
        if tensordict is not None and RESET in tensordict:
            mask = batch_mask(tensordict.get(RESET), self.batch_size)
        if mask is None or not self._has_reset:
            root = reset_where(self)
            self._has_reset, self._pending = True, None
            out = root.clone()
            if tensordict is not None:
                for key, value in tensordict.exclude(RESET, NEXT, *self._root_keys()).items():
                    out.set(key, value)
            return out
        pending = self._pending if self._pending is not None else torch.zeros_like(mask)
        fresh = mask & ~pending
        reset_where(self, fresh)
        self._pending = pending & ~mask
        return merge_reset(tensordict, self._root_buf, mask)

    def _root_keys(self) -> list[Any]:
        return (
            self.observation_spec.keys(True, True)
            + self.state_spec.keys(True, True)
            + list(DONE_KEYS)
        )

    def _action_from(self, tensordict: TensorDictBase) -> Any:
        if len(self.action_keys) == 1:
            if self.action_key not in tensordict.keys(True, True):
                raise InvalidActionError(
                    f"{self.action_key!r}: missing from the input TensorDict "
                    f"(keys: {list(tensordict.keys(True, True))})"
                )
            return tensordict.get(self.action_key)
        return tensordict

    def _pre_step(self) -> None:
        self._check_open()
        if not self._has_reset:
            raise RuntimeError(f"{type(self).__name__}: call reset() before step()")

    @profiled("EnvBase.step")
    def step(self, tensordict: TensorDictBase) -> TensorDictBase:
        """Step with ``tensordict[action_key]``; the results go to ``tensordict["next"]``.

        A finished sub-env must be reset (``reset(td)`` with ``"_reset"``) before it is
        stepped again; ``step_and_maybe_reset`` does both.
        """
        self._pre_step()
        if self._pending is not None and self._pending.any():
            raise RuntimeError(f"{type(self).__name__}: {self._done_message()}")
        nxt, _ = self.fast_step(self._action_from(tensordict))
        self._pending = nxt.get(DONE).reshape(self.batch_size).clone()
        set_next(tensordict, nxt.clone())
        return tensordict

    def _done_message(self) -> str:
        """Which finished sub-envs a ``step`` refuses, and how to reset them."""
        if not self.batch_size:  # one unbatched simulator: no sub-env indices to name
            return "the env is done; call reset() before step(), or use step_and_maybe_reset"
        idx = self._pending.nonzero().squeeze(-1).tolist()
        return (f"sub-envs {idx} are done; reset them with reset(td) where td['_reset'] "
                "marks them, or use step_and_maybe_reset")

    @profiled("EnvBase.step_and_maybe_reset")
    def step_and_maybe_reset(
        self, tensordict: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        """Step, then reset only the finished sub-envs.

        Returns:
            ``(tensordict, next_root)``: ``tensordict`` with ``"next"`` filled in (the
            real final observation on finished sub-envs) and the root of the next step
            (the reset observation on finished sub-envs).
        """
        self._pre_step()
        if self._pending is not None and self._pending.any():
            self.reset(TensorDict({RESET: self._pending.clone()}, batch_size=self.batch_size))
        nxt, root = self.fast_step(self._action_from(tensordict))
        env_next = nxt.clone()
        extra = set_next(tensordict, env_next)
        next_root = root.clone()
        for key in extra:  # entries the policy wrote under "next" (e.g. recurrent state)
            next_root.set(key, tensordict.get((NEXT, *((key,) if isinstance(key, str) else key))))
        return tensordict, next_root

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Write a random action (from the env's own generator) into ``tensordict``."""
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        tensordict.update(self.full_action_spec.rand(generator=self._rng))
        return tensordict

    def rand_step(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """``step`` with a random action."""
        if tensordict is None:
            tensordict = (
                self.reset() if not self._has_reset else TensorDict(batch_size=self.batch_size)
            )
        return self.step(self.rand_action(tensordict))

    @profiled("EnvBase.rollout")
    def rollout(
        self,
        max_steps: int,
        policy: Any = None,
        *,
        auto_reset: bool = True,
        break_when_any_done: bool = True,
        tensordict: TensorDictBase | None = None,
        auto_cast_to_device: bool = False,
    ) -> TensorDictBase:
        """Run ``max_steps`` steps and return them stacked along the LAST dim: ``[*B, T]``.

        Args:
            max_steps: number of steps.
            policy: a callable ``td -> td`` writing the action key; random actions if None.
            auto_reset: reset every sub-env first (else start from ``tensordict`` or the
                env's current state).
            break_when_any_done: stop after the first step where any sub-env is done;
                otherwise finished sub-envs are reset and the rollout goes on.
            tensordict: the starting root when ``auto_reset=False``.
            auto_cast_to_device: move the policy's input to the device of its parameters
                and its outputs back to the env's (TorchRL's argument); nothing to do when
                they share a device or the policy has no parameters.

        Returns:
            A TensorDict of batch size ``[*batch_size, T]`` in the rollout layout.
        """
        self._check_open()
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"rollout: max_steps must be a positive int, received {max_steps!r}")
        if auto_reset:
            reset_where(self)
            self._has_reset, self._pending = True, None
        else:
            if not self._has_reset:
                raise RuntimeError("rollout(auto_reset=False) needs a prior reset()")
            if self._pending is not None and self._pending.any():
                self.reset(TensorDict({RESET: self._pending.clone()}, batch_size=self.batch_size))
        if not isinstance(auto_cast_to_device, bool):
            raise ValueError(
                f"rollout: auto_cast_to_device must be a bool, received {auto_cast_to_device!r}")
        if auto_cast_to_device and policy is not None:
            policy = device_cast(policy, self.device)
        data, done = run_rollout(self, max_steps, policy, break_when_any_done, tensordict)
        self._pending = done if break_when_any_done else None
        return data

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the env (its random actions and the backend); the next full reset uses it.

        Returns:
            The next seed to use for another env (``seed + number of sub-envs``).
        """
        if seed is None:
            self._rng.seed()
            self._set_seed(None)
            return None
        self._rng.manual_seed(int(seed))
        self._set_seed(int(seed))
        return int(seed) + max(1, self.batch_size.numel())

    def close(self) -> None:
        """Release the backend; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._close()

    @property
    def is_closed(self) -> bool:
        return self._closed

    def __enter__(self) -> EnvBase:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={tuple(self.batch_size)}, device={self.device})"
