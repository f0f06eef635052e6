"""Atomic checkpoints of a whole training run: ``save_checkpoint`` / ``load_checkpoint``.

A checkpoint is one directory, ``<path>/ckpt-<n>``, written by
:class:`rl_profiling.atomic.AtomicDirectory` (the one atomic writer, shared with rl-replay's
``dumps``): built as ``ckpt-<n>.tmp``, its ``manifest.json`` written last, renamed into
place; ``<path>/LATEST`` (replaced atomically) names it, and only then are checkpoints
beyond the ``keep`` newest removed. Killed at any moment, even by SIGKILL during a write,
``LATEST`` names a complete checkpoint: the previous one until the replace.

Inside: ``manifest.json`` (format, package versions, per component its kind and class,
and the size and SHA-256 of ``state.pt``), ``state.pt`` (every ``state_dict``, the RNG
states and ``extra``) and ``replay/<name>/`` for each replay buffer, written by the
buffer's own ``dumps`` (its own manifest; chunks of rows that did not change since the
checkpoint before the newest are hard links). A load verifies the checkpoint and falls
back to the newest intact one. See ``docs/checkpointing.md``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import random
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rl_profiling.atomic import MANIFEST, AtomicDirectory, guard

from rl_collectors.exceptions import CheckpointError

__all__ = [
    "FORMAT", "LATEST", "latest_checkpoint", "load_checkpoint", "save_checkpoint",
    "skipped_text", "valid_checkpoint",
]  # fmt: skip

_log = logging.getLogger(__name__)

FORMAT = 1
"""Version of the checkpoint layout; a checkpoint of another format is refused."""

LATEST, _MANIFEST, _STATE, _REPLAY = "LATEST", MANIFEST, "state.pt", "replay"
_PACKAGES = (
    "rl-profiling", "rl-envs", "rl-collectors", "rl-replay", "rl-objectives", "rl-recurrent",
    "rl-modules",
)  # fmt: skip
_INFO = ("torch", "tensordict", "numpy", "gymnasium")  # recorded, not checked


@functools.cache  # reading the metadata costs tens of ms, each save
def _versions(names: tuple[str, ...]) -> dict[str, str]:
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def _kind(obj: Any) -> str:
    if hasattr(obj, "dumps") and hasattr(obj, "loads"):
        return "replay"
    if hasattr(obj, "state_dict") and hasattr(obj, "load_state_dict"):
        return "state_dict"
    raise TypeError(
        f"components: expected objects with state_dict/load_state_dict (or a replay buffer's "
        f"dumps/loads), got {type(obj).__name__}"
    )


def _type_name(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _rng_state() -> dict[str, Any]:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def latest_checkpoint(path: Any) -> Path | None:
    """The complete checkpoint ``path/LATEST`` names, or ``None`` when there is none
    (not verified: see :func:`valid_checkpoint`)."""
    return AtomicDirectory(path, error=CheckpointError).latest()


def _replay_problem(where: Path, checksum: bool) -> str | None:
    """Why a replay buffer's snapshot inside checkpoint ``where`` is not intact."""
    components = json.loads((where / _MANIFEST).read_text()).get("components", {})
    for name, entry in components.items():
        if entry.get("kind") != "replay":
            continue
        replay = AtomicDirectory(where / _REPLAY / name, error=CheckpointError)
        inner = replay.latest()
        why = "no complete snapshot" if inner is None else replay.verify(inner, checksum=checksum)
        if why is not None:
            return f"{_REPLAY}/{name}/{replay.latest_name()}: {why}"
    return None


def valid_checkpoint(path: Any, *, checksum: bool = False) -> tuple[Path | None, list]:
    """The newest intact checkpoint under ``path``, and ``(checkpoint, why)`` for each
    newer one skipped (a folder ``LATEST`` names that is gone, a file cut short or changed).

    Args:
        path: the run's checkpoint directory.
        checksum: also check the replay buffers' chunk files by checksum (by default by
            size: a restore stays memory-mapped); ``state.pt`` is always checksummed.
    """
    folder = AtomicDirectory(path, error=CheckpointError)
    return folder.newest_valid(
        checksum=checksum, check=functools.partial(_replay_problem, checksum=checksum)
    )


def _write_state(tmp: Path, payload: dict[str, Any]) -> None:
    body = io.BytesIO()
    torch.save(payload, body)  # in memory first: the file's size is known, a failure named
    view = body.getbuffer()
    with guard(tmp / _STATE, len(view), CheckpointError), open(tmp / _STATE, "wb") as f:
        f.write(view)
        f.flush()
        os.fsync(f.fileno())


def _dump_replay(name: str, buffer: Any, tmp: Path, base: Path | None) -> None:
    try:
        buffer.dumps(tmp / _REPLAY / name, base=base / _REPLAY / name if base else None)
    except (OSError, RuntimeError) as err:  # rl-replay's CheckpointError is a RuntimeError
        raise CheckpointError(f"replay buffer {name!r}: {err}") from err


def save_checkpoint(
    path: Any, *, extra: dict[str, Any] | None = None, rng: bool = True, keep: int = 2,
    **components: Any,
) -> Path:
    """Write every component into a new checkpoint under ``path``, atomically.

    Args:
        path: the run's checkpoint directory (created if needed).
        extra: small picklable values of the loop (e.g. ``{"global_step": 1200}``),
            returned by :func:`load_checkpoint`.
        rng: also save torch's (CPU and initialised CUDA), numpy's and Python's global
            RNG states.
        keep: checkpoints kept (the newest ``keep``; 2: one to fall back to).
        **components: the run's objects by name: anything with ``state_dict`` /
            ``load_state_dict`` (modules, optimizers, collectors, transformed envs,
            target updaters) and replay buffers (saved with their own ``dumps``).

    Returns:
        The new checkpoint's directory.

    Raises:
        TypeError: a component has neither ``state_dict`` nor ``dumps``.
        CheckpointError: an OS failure (full disk, file size limit, permissions) naming
            the path, the bytes wanted and the cause; the unfinished checkpoint is
            removed and ``LATEST`` still names the previous one.

    Examples:
        >>> import tempfile, torch
        >>> from rl_collectors import load_checkpoint, save_checkpoint
        >>> net = torch.nn.Linear(2, 2)
        >>> opt = torch.optim.Adam(net.parameters())
        >>> run = tempfile.mkdtemp()
        >>> _ = save_checkpoint(run, policy=net, optim=opt, extra={"step": 7})
        >>> load_checkpoint(run, policy=net, optim=opt)["step"]
        7
    """
    folder = AtomicDirectory(path, keep=keep, error=CheckpointError)
    kinds = {name: _kind(obj) for name, obj in components.items()}
    base = folder.base()
    tmp = folder.begin()
    try:
        states = {n: o.state_dict() for n, o in components.items() if kinds[n] == "state_dict"}
        _write_state(tmp, {"components": states, "extra": dict(extra or {}),
                           "rng": _rng_state() if rng else None})
        for name, obj in components.items():
            if kinds[name] == "replay":
                _dump_replay(name, obj, tmp, base)
    except BaseException:
        folder.abort(tmp)
        raise
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": _versions(_PACKAGES),
        "libraries": _versions(_INFO),
        "components": {n: {"kind": kinds[n], "type": _type_name(o)} for n, o in components.items()},
        "rng": rng,
    }
    return folder.commit(tmp, manifest, exclude=(f"{_REPLAY}/*",))


def _check_manifest(manifest: dict, components: dict[str, Any], where: Path, strict: bool) -> None:
    if manifest.get("format") != FORMAT:
        raise CheckpointError(
            f"{where}: format {manifest.get('format')!r}, expected {FORMAT} (written by "
            f"another version of rl-collectors)"
        )
    saved = manifest["components"]
    if set(saved) != set(components):
        raise CheckpointError(
            f"{where}: components differ: the checkpoint holds {sorted(saved)}, got "
            f"{sorted(components)} (missing: {sorted(set(saved) - set(components))}, not in "
            f"the checkpoint: {sorted(set(components) - set(saved))})"
        )
    for name, obj in components.items():
        if saved[name]["type"] != _type_name(obj) or saved[name]["kind"] != _kind(obj):
            raise CheckpointError(
                f"{where}: component {name!r} was a {saved[name]['type']}, got a {_type_name(obj)}"
            )
    if strict:
        now = _versions(_PACKAGES)  # of this process (cached)
        for package, version in manifest["versions"].items():
            if now.get(package, version) != version:
                raise CheckpointError(
                    f"{where}: written by {package} {version}, this is {package} "
                    f"{now[package]}; pass strict=False to load it anyway"
                )


def skipped_text(skipped: list[tuple[Path, str]]) -> str:
    return "; ".join(f"{where.name}: {why}" for where, why in skipped)


def _choose(path: Any, checksum: bool) -> Path:
    where, skipped = valid_checkpoint(path, checksum=checksum)
    if where is None:
        found = "no checkpoint" if not skipped else f"none intact ({skipped_text(skipped)})"
        raise CheckpointError(
            f"path: expected a checkpoint directory with an intact checkpoint, got "
            f"{str(path)!r}: {found}"
        )
    if skipped:
        message = f"{path}: resuming from {where.name}; skipped {skipped_text(skipped)}"
        _log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return where


def load_checkpoint(
    path: Any, *, strict: bool = True, checksum: bool = False, **components: Any
) -> dict[str, Any]:
    """Load the newest intact checkpoint under ``path`` into ``components`` (same names).

    The checkpoint is verified first (``state.pt`` by size and SHA-256, replay chunks by
    size, or by checksum with ``checksum=True``); a newer one that fails is skipped with a
    ``RuntimeWarning`` (and a log record) naming it and why. State-dict components are
    loaded in the order given, collectors (objects with ``update_policy_weights_``) last,
    so that they share the policy's restored weights with their workers; replay buffers
    load their own snapshot; RNG states are restored last of all.

    Args:
        path: the run's checkpoint directory.
        strict: refuse a checkpoint written by other versions of the rl packages.
        checksum: check replay chunk files by checksum too.
        **components: the run's objects, built as for a fresh run.

    Returns:
        The ``extra`` dict given to :func:`save_checkpoint`.

    Raises:
        CheckpointError: no intact checkpoint under ``path`` (each one's problem named),
            or it was written with another format, other components (names or classes)
            or, when ``strict``, other package versions; the message names what differs.
            Nothing is loaded.
    """
    where = _choose(path, checksum)
    manifest = json.loads((where / _MANIFEST).read_text())
    _check_manifest(manifest, components, where, strict)
    payload = torch.load(where / _STATE, weights_only=False)
    order = sorted(components, key=lambda n: hasattr(components[n], "update_policy_weights_"))
    for name in order:
        obj = components[name]
        if manifest["components"][name]["kind"] == "replay":
            obj.loads(where / _REPLAY / name, checksum=checksum)
        else:
            obj.load_state_dict(payload["components"][name])
    if payload["rng"] is not None:
        _set_rng_state(payload["rng"])
    return payload["extra"]
