"""Policy preparation: defaults, wrapping, device placement and output discovery.

Done once, at construction: the policy is called on a copy of the first policy input to
learn which keys it writes (its outputs are then copied into the batch by key on every
step), and to fail early, with a clear message, when it does not write the action.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any

import torch
from rl_envs._direct import unrolled
from tensordict import TensorDictBase
from tensordict.nn import (
    InteractionType,
    TensorDictModule,
    TensorDictModuleBase,
    set_interaction_type,
)

from rl_collectors._layout import leaf_keys, nested
from rl_collectors.exceptions import CollectorError

__all__ = [
    "BatchedRandomPolicy",
    "StreamSyncActor",
    "exploration_context",
    "find_outputs",
    "graphed_in_place",
    "policy_forward",
    "prepare_policy",
    "resolve_interaction",
]

logger = logging.getLogger(__name__)


def resolve_interaction(exploration_type: Any) -> InteractionType:
    """Normalise ``exploration_type`` (an ``InteractionType`` or its name)."""
    if isinstance(exploration_type, InteractionType):
        return exploration_type
    names = [m.value for m in InteractionType]
    if isinstance(exploration_type, str) and exploration_type.lower() in names:
        return InteractionType(exploration_type.lower())
    raise ValueError(
        f"exploration_type: expected a tensordict.nn.InteractionType or one of {names}, "
        f"got {exploration_type!r}"
    )


def exploration_context(kind: InteractionType) -> Any:
    """The context manager that sets the interaction (exploration) type."""
    return set_interaction_type(kind)


def prepare_policy(policy: Any, env: Any, policy_device: torch.device | None) -> Any:
    """Return the callable the collector runs: ``RandomPolicy`` for ``None``, a
    ``TensorDictModule`` around a plain ``nn.Module``, a copy moved to ``policy_device``."""
    if policy is None:
        from rl_envs import RandomPolicy

        spec = env.full_action_spec if len(env.action_keys) > 1 else env.action_spec
        return RandomPolicy(spec, env.action_key)
    if isinstance(policy, torch.nn.Module) and not isinstance(policy, TensorDictModuleBase):
        obs_keys = env.observation_spec.keys(True, True)
        if len(obs_keys) != 1:
            raise CollectorError(
                f"policy: a plain nn.Module needs an env with exactly one observation key, "
                f"got {obs_keys}; wrap it in a tensordict.nn.TensorDictModule"
            )
        policy = TensorDictModule(policy, in_keys=list(obs_keys), out_keys=[env.action_key])
    if not callable(policy):
        raise TypeError(
            f"policy: expected a callable td -> td or None, got {type(policy).__name__}"
        )
    if policy_device is not None and isinstance(policy, torch.nn.Module):
        params = list(policy.parameters())
        if params and params[0].device != policy_device:
            policy = copy.deepcopy(policy).to(policy_device)
    return policy


def policy_forward(policy: Any, options: Any, policy_device: torch.device,
                   out_keys: list[Any]) -> Any:
    """The callable the rollout runs: ``policy``, compiled and/or CUDA-graphed per ``options``.

    ``policy`` itself stays eager (weights, ``state_dict`` and the probe use it); the
    wrappers share its parameters, so in-place weight updates reach them. Eager, a policy
    built of nested ``TensorDictSequential`` modules is called member by member
    (``rl_envs._direct.unrolled``: the same calls without the sequences' dispatch).
    ``out_keys`` are the keys the policy writes (:func:`find_outputs`).
    """
    forward = policy
    if not options.compile_policy and not options.cudagraph_policy:
        forward = unrolled(policy)  # nested TensorDictSequentials: their members, in order
    if options.compile_policy and isinstance(policy, torch.nn.Module):
        kwargs = options.compile_policy if isinstance(options.compile_policy, dict) else {}
        forward = torch.compile(forward, **kwargs)
    if options.cudagraph_policy:
        if policy_device.type != "cuda":
            logger.info(
                "cudagraph_policy: inert, the policy runs on %s (CUDA graphs need a CUDA device)",
                policy_device,
            )
        else:
            from tensordict.nn import CudaGraphModule

            kwargs = options.cudagraph_policy if isinstance(options.cudagraph_policy, dict) else {}
            forward = graphed_in_place(CudaGraphModule(forward, **kwargs), out_keys)
    return forward


def graphed_in_place(graphed: Any, out_keys: list[Any]) -> Any:
    """``graphed`` (a ``CudaGraphModule``) called as the rollout calls a policy: in place.

    ``CudaGraphModule`` rebinds the entries of the TensorDict it is given (its warm-up and
    capture calls replace each leaf with a clone), which would cut the rollout's policy
    input off from the buffers the env writes: every later step would read the
    observation of the capture. It is given a shallow copy instead, and the policy's
    outputs are copied back into the caller's leaves. ``torch.distributions``' argument
    checks (a host-side test a CUDA graph cannot capture) are off around the call.
    """

    def forward(td: TensorDictBase) -> TensorDictBase:
        with _no_distribution_checks():
            out = graphed(td.copy())
        for key in out_keys:
            dst = td.get(key, None)
            if dst is None:
                td.set(key, out.get(key))
            else:
                dst.copy_(out.get(key))
        return td

    return forward


@contextlib.contextmanager
def _no_distribution_checks() -> Iterator[None]:
    """``torch.distributions``' default ``validate_args`` off, then back to what it was (as
    rl-objectives' graphed update step does; this package may not import that one)."""
    before = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(before)


class BatchedRandomPolicy:
    """Uniform random actions for a batch of any size ``k`` (``AsyncBatchedCollector`` with
    ``policy=None``): ``k`` draws from a single env's action spec, reshaped to ``[k, *shape]``."""

    def __init__(self, spec: Any, key: Any, shape: torch.Size) -> None:
        self.spec, self.key, self.shape = spec, key, shape

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        k = td.batch_size[0]
        td.set(self.key, torch.stack([self.spec.rand() for _ in range(k)]).reshape(k, *self.shape))
        return td


class StreamSyncActor:
    """Run an actor, then wait for the policy device's CUDA stream (its outputs were copied
    back with ``non_blocking``); what ``no_cuda_sync=True`` skips."""

    __slots__ = ("actor", "stream")
    writes_batch = False

    def __init__(self, actor: Any, device: torch.device) -> None:
        self.actor = actor
        self.stream = torch.cuda.current_stream(device)

    def __call__(self, policy_input: TensorDictBase, t: int) -> Any:
        action = self.actor(policy_input, t)
        self.stream.synchronize()
        return action


def find_outputs(
    policy: Any,
    probe: TensorDictBase,
    action_keys: list[Any],
    kind: InteractionType,
    trust: bool = False,
) -> list[tuple]:
    """Call ``policy`` once on ``probe`` and return the keys it wrote (new or replaced leaves).

    With ``trust=True`` the keys are returned unchecked (``trust_policy``).

    Raises:
        CollectorError: the policy raised, returned another object than its input, did
            not write an action key, or overwrote an env key.
    """
    before = {k: probe.get(k) for k in leaf_keys(probe)}
    try:
        with torch.no_grad(), exploration_context(kind):
            out = policy(probe)
    except Exception as err:
        raise CollectorError(
            f"policy: calling it on the first input (keys {sorted(map(str, before))}) raised "
            f"{type(err).__name__}: {err}"
        ) from err
    if out is not None and out is not probe and not trust:
        raise CollectorError(
            "policy: expected it to write its outputs into the input TensorDict and return "
            f"it (TensorDictModule semantics), got a different {type(out).__name__}"
        )
    written = [k for k in leaf_keys(probe) if k not in before or probe.get(k) is not before[k]]
    if trust:
        return written
    missing = [k for k in map(nested, action_keys) if k not in written]
    if missing:
        raise CollectorError(
            f"policy: expected it to write the action key(s) {[_show(k) for k in missing]}, "
            f"it wrote {[_show(k) for k in written]}"
        )
    clobbered = [k for k in written if k in before and k not in map(nested, action_keys)]
    if clobbered:
        raise CollectorError(
            f"policy: it overwrites the env entries {[_show(k) for k in clobbered]}; a policy "
            "may add keys but not replace what the env writes (use another out_key)"
        )
    return written


def _show(key: tuple) -> Any:
    return key[0] if len(key) == 1 else key
