"""Policy export: a ``torch.export`` program of the deterministic policy (loads and runs
with torch alone, as in TorchRL's export tutorial) and a plain state-dict path."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rl_modules import ExplorationType, set_exploration_type
from tensordict import TensorDict
from torch import nn

from rl_trainers.exceptions import ExportError

__all__ = ["export_policy", "load_policy", "save_policy"]

CHECK_CALLS = 5
"""Calls with different RNG states that must give the same action before export (this
also runs past rl_modules' first-calls spec check, which torch.export cannot trace)."""


class _TensorPolicy(nn.Module):
    """``(tensor, ...) -> action``: the policy's in_keys as positional tensors."""

    def __init__(self, policy: nn.Module, in_keys: Sequence[Any], out_key: Any) -> None:
        super().__init__()
        self.policy, self.in_keys, self.out_key = policy, list(in_keys), out_key

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        batch = tensors[0].shape[:-1]
        td = TensorDict(dict(zip(self.in_keys, tensors, strict=True)), batch_size=batch)
        out = self.policy(td)
        return (out if out is not None else td).get(self.out_key)


def _check_deterministic(module: _TensorPolicy, example: tuple[torch.Tensor, ...],
                         exploration_type: Any) -> None:
    actions = []
    with torch.no_grad(), set_exploration_type(exploration_type):
        for seed in range(CHECK_CALLS):
            torch.manual_seed(seed)
            try:
                actions.append(module(*example))
            except (NotImplementedError, RuntimeError, KeyError) as err:
                raise ExportError(
                    f"export_policy: expected the policy to run under {exploration_type}, "
                    f"it raised {type(err).__name__}: {err}"
                ) from err
    if any(not torch.equal(a, actions[0]) for a in actions[1:]):
        raise ExportError(
            f"export_policy: expected a deterministic-capable policy (the same action "
            f"under {exploration_type} whatever the RNG), received different actions for "
            "the same input: give its distribution a mode/deterministic_sample, or export "
            "the network that outputs the action"
        )


def export_policy(policy: nn.Module, path: str | os.PathLike, example: Any, *,
                  in_keys: Sequence[Any] | None = None, out_key: Any = "action",
                  exploration_type: Any = ExplorationType.DETERMINISTIC) -> Path:
    """Export the deterministic ``policy`` with ``torch.export`` to ``path`` (``.pt2``).

    The program takes the policy's ``in_keys`` as positional tensors and returns the
    action: ``torch.export.load(path).module()(observation)`` with torch alone. The batch
    dim is dynamic when torch can keep it so, else the example's.

    Args:
        policy: a TensorDict module (``in_keys`` / ``out_keys``), e.g. a
            ``ProbabilisticActor``.
        path: the file to write (replaced atomically).
        example: a TensorDict (or a tensor, for one in_key) with a batch of inputs.
        in_keys: the inputs (default: ``policy.in_keys``).
        out_key: the output to return.
        exploration_type: what "deterministic" means (TorchRL's DETERMINISTIC: the mode).

    Returns:
        The path written.

    Raises:
        ExportError: the policy's action is not the same under ``exploration_type``
            whatever the RNG, or it cannot be traced; nothing is written.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict.nn import TensorDictModule
        >>> net = TensorDictModule(torch.nn.Linear(4, 2), ["observation"], ["action"])
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = export_policy(net, f"{d}/policy.pt2", torch.zeros(3, 4))
        ...     program = torch.export.load(path).module()
        ...     program(torch.ones(3, 4)).shape
        torch.Size([3, 2])
    """
    in_keys = list(in_keys if in_keys is not None else getattr(policy, "in_keys", []))
    if not in_keys:
        raise ExportError("export_policy: expected a policy with in_keys (or in_keys=...), "
                          f"received {type(policy).__name__} without")
    tensors = ((example,) if isinstance(example, torch.Tensor)
               else tuple(example.get(k) for k in in_keys))
    module = _TensorPolicy(policy, in_keys, out_key).eval()
    _check_deterministic(module, tensors, exploration_type)
    program = _export(module, tensors, exploration_type)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    try:
        torch.export.save(program, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _export(module: nn.Module, tensors: tuple[torch.Tensor, ...], exploration_type: Any):
    batch = torch.export.Dim("batch", min=1)
    # a size-1 dim is specialised by torch.export: trace a batch of 2 to keep it dynamic
    wide = tuple(t.expand(2, *t.shape[1:]) if t.shape[0] == 1 else t for t in tensors)
    dynamic = tuple({0: batch} for _ in tensors)
    with torch.no_grad(), set_exploration_type(exploration_type):
        try:
            return torch.export.export(module, wide, dynamic_shapes=(dynamic,), strict=False)
        except Exception:  # noqa: BLE001 (a batch dim the policy specialises: export static)
            pass
        try:
            return torch.export.export(module, tensors, strict=False)
        except Exception as err:  # torch.export raises many types
            raise ExportError(
                f"export_policy: torch.export could not trace the policy "
                f"({type(err).__name__}): {str(err).splitlines()[0] if str(err) else ''}"
            ) from err


def save_policy(policy: nn.Module, path: str | os.PathLike) -> Path:
    """Save ``policy.state_dict()`` to ``path`` (written atomically).

    Examples:
        >>> import tempfile, torch
        >>> net = torch.nn.Linear(4, 2)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     path = save_policy(net, f"{d}/policy.pt")
        ...     other = load_policy(torch.nn.Linear(4, 2), path)
        ...     torch.equal(other.weight, net.weight)
        True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        torch.save(policy.state_dict(), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_policy(policy: nn.Module, path: str | os.PathLike) -> nn.Module:
    """Load a :func:`save_policy` file into ``policy`` (same architecture); returns it."""
    policy.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    return policy
