"""Atomic checkpoints of a whole training run: ``save_checkpoint`` / ``load_checkpoint``.

A checkpoint is one directory, ``<path>/ckpt-<n>``, written as ``ckpt-<n>.tmp`` and
renamed into place once complete; ``<path>/LATEST`` (replaced atomically) names it, and
only then are older checkpoints removed. Killed at any moment, even by SIGKILL during a
write, ``LATEST`` names a complete checkpoint: the previous one until the replace.

Inside: ``manifest.json`` (format, package versions, and per component its kind and
class), ``state.pt`` (every ``state_dict``, the RNG states and ``extra``) and
``replay/<name>/`` for each replay buffer, written by the buffer's own ``dumps`` with the
previous checkpoint's as its base (chunks of rows that did not change are hard links).
See ``docs/checkpointing.md``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import random
import shutil
import signal
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_collectors.exceptions import CheckpointError

__all__ = ["FORMAT", "Checkpointer", "latest_checkpoint", "load_checkpoint", "save_checkpoint"]

_log = logging.getLogger(__name__)

FORMAT = 1
"""Version of the checkpoint layout; a checkpoint of another format is refused."""

_LATEST, _MANIFEST, _STATE, _REPLAY = "LATEST", "manifest.json", "state.pt", "replay"
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


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def latest_checkpoint(path: Any) -> Path | None:
    """The complete checkpoint ``path/LATEST`` names, or ``None`` when there is none."""
    try:
        name = (Path(path) / _LATEST).read_text().strip()
    except FileNotFoundError:
        return None
    found = Path(path) / name
    return found if (found / _MANIFEST).is_file() else None


def save_checkpoint(
    path: Any, *, extra: dict[str, Any] | None = None, rng: bool = True, **components: Any
) -> Path:
    """Write every component into a new checkpoint under ``path``, atomically.

    Args:
        path: the run's checkpoint directory (created if needed).
        extra: small picklable values of the loop (e.g. ``{"global_step": 1200}``),
            returned by :func:`load_checkpoint`.
        rng: also save torch's (CPU and initialised CUDA), numpy's and Python's global
            RNG states.
        **components: the run's objects by name: anything with ``state_dict`` /
            ``load_state_dict`` (modules, optimizers, collectors, transformed envs,
            target updaters) and replay buffers (saved with their own ``dumps``).

    Returns:
        The new checkpoint's directory.

    Raises:
        TypeError: a component has neither ``state_dict`` nor ``dumps``.

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
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    kinds = {name: _kind(obj) for name, obj in components.items()}
    previous = latest_checkpoint(path)
    number = int(previous.name.removeprefix("ckpt-")) + 1 if previous else 0
    final = path / f"ckpt-{number:06d}"
    tmp = path / f"{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a save killed mid-write
    tmp.mkdir()
    states = {n: obj.state_dict() for n, obj in components.items() if kinds[n] == "state_dict"}
    payload = {
        "components": states,
        "extra": dict(extra or {}),
        "rng": _rng_state() if rng else None,
    }
    with open(tmp / _STATE, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    for name, obj in components.items():
        if kinds[name] == "replay":
            base = previous / _REPLAY / name if previous is not None else None
            obj.dumps(tmp / _REPLAY / name, base=base)
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "versions": _versions(_PACKAGES),
        "libraries": _versions(_INFO),
        "components": {n: {"kind": kinds[n], "type": _type_name(o)} for n, o in components.items()},
        "rng": rng,
    }
    (tmp / _MANIFEST).write_text(json.dumps(manifest, indent=1))
    _fsync(tmp / _MANIFEST)
    shutil.rmtree(final, ignore_errors=True)  # complete but never named by LATEST
    os.rename(tmp, final)
    _fsync(path)
    pointer = path / f"{_LATEST}.tmp"
    pointer.write_text(final.name)
    _fsync(pointer)
    os.replace(pointer, path / _LATEST)
    _fsync(path)
    for old in path.glob("ckpt-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


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


def load_checkpoint(path: Any, *, strict: bool = True, **components: Any) -> dict[str, Any]:
    """Load the latest checkpoint under ``path`` into ``components`` (by the same names).

    State-dict components are loaded in the order given, collectors (objects with
    ``update_policy_weights_``) last, so that they share the policy's restored weights
    with their workers; replay buffers load their own snapshot; RNG states are restored
    last of all.

    Args:
        path: the run's checkpoint directory.
        strict: refuse a checkpoint written by other versions of the rl packages.
        **components: the run's objects, built as for a fresh run.

    Returns:
        The ``extra`` dict given to :func:`save_checkpoint`.

    Raises:
        CheckpointError: no complete checkpoint under ``path``, or it was written with
            another format, other components (names or classes) or, when ``strict``,
            other package versions; the message names what differs. Nothing is loaded.
    """
    where = latest_checkpoint(path)
    if where is None:
        raise CheckpointError(
            f"path: expected a checkpoint directory with {_LATEST}, got {str(path)!r}"
        )
    manifest = json.loads((where / _MANIFEST).read_text())
    _check_manifest(manifest, components, where, strict)
    payload = torch.load(where / _STATE, weights_only=False)
    order = sorted(components, key=lambda n: hasattr(components[n], "update_policy_weights_"))
    for name in order:
        obj = components[name]
        if manifest["components"][name]["kind"] == "replay":
            obj.loads(where / _REPLAY / name)
        else:
            obj.load_state_dict(payload["components"][name])
    if payload["rng"] is not None:
        _set_rng_state(payload["rng"])
    return payload["extra"]


class Checkpointer:
    """Periodic checkpoints of a training loop, and one more when the job is told to stop.

    Give it the run's components once; call :meth:`restore` before the loop and
    :meth:`step` at the end of each iteration (a consistent point: the batch collected,
    the update done). ``step`` saves every ``every_frames`` frames, and at once when one
    of ``signals`` arrived (Slurm sends SIGTERM some time before SIGKILL), after which
    it returns ``True``: the loop breaks and the process exits cleanly. The signal
    handler only sets a flag, so a checkpoint is never written from a half-done step.
    When the signal had a handler before (submitit's preemption handler for SIGUSR2,
    which calls the job's ``checkpoint`` method and requeues it), that handler is
    called after the save, so the job requeues itself and resumes from this checkpoint.

    Args:
        directory: the run's checkpoint directory (``None`` or ``""``: no checkpoints,
            signals are still turned into a clean stop).
        every_frames: save when this many frames passed since the last save (0: only
            on a signal and when :meth:`step` is told ``final=True``).
        signals: signals that request a checkpoint and a stop (SIGTERM: Slurm's and
            most schedulers'; SIGUSR2: submitit's preemption and time-limit signal).
            Handlers can only be installed from the main thread; elsewhere none is.
        **components: as for :func:`save_checkpoint`.

    Examples:
        >>> import tempfile, torch
        >>> from rl_collectors import Checkpointer
        >>> net = torch.nn.Linear(2, 2)
        >>> ckpt = Checkpointer(tempfile.mkdtemp(), every_frames=100, policy=net)
        >>> ckpt.restore() is None  # nothing saved yet: a fresh run
        True
        >>> [ckpt.step(frames, {"frames": frames}) for frames in (50, 100, 150)]
        [False, False, False]
        >>> ckpt.saved_frames, ckpt.restore()["frames"]
        (100, 100)
        >>> ckpt.close()
    """

    def __init__(
        self,
        directory: Any,
        *,
        every_frames: int = 0,
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR2),
        **components: Any,
    ) -> None:
        if not isinstance(every_frames, int) or every_frames < 0:
            raise ValueError(f"every_frames: expected an int >= 0, got {every_frames!r}")
        self.directory = Path(directory) if directory else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.every_frames, self.components = every_frames, components
        self.saved_frames = 0
        self.stop_requested: int | None = None  # the signal received, if any
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = signum

    def restore(self) -> dict[str, Any] | None:
        """Load the latest checkpoint, if any; returns its ``extra`` (``None``: none)."""
        if self.directory is None or latest_checkpoint(self.directory) is None:
            return None
        extra = load_checkpoint(self.directory, **self.components)
        self.saved_frames = int(extra.get("frames", 0))
        return extra

    def save(self, frames: int, extra: dict[str, Any] | None = None) -> Path | None:
        """Write a checkpoint now (``extra`` gets ``"frames"``)."""
        if self.directory is None:
            return None
        start = time.perf_counter()
        where = save_checkpoint(self.directory, extra={**(extra or {}), "frames": frames},
                                **self.components)
        self.saved_frames = frames
        _log.info(
            "checkpoint %s at %d frames in %.3f s", where, frames, time.perf_counter() - start
        )
        return where

    def step(
        self, frames: int, extra: dict[str, Any] | None = None, *, final: bool = False
    ) -> bool:
        """Save if due (``every_frames`` passed, a signal arrived, or ``final``).

        Returns:
            ``True`` when a stop was requested by a signal: the caller leaves its loop.
        """
        due = self.every_frames and frames - self.saved_frames >= self.every_frames
        if due or final or self.stop_requested is not None:
            self.save(frames, extra)
        if self.stop_requested is None:
            return False
        previous = self._previous.get(self.stop_requested)
        if callable(previous):  # e.g. submitit's: checkpoint() the job, requeue, exit
            self.close()
            previous(self.stop_requested, None)
        return True

    def close(self) -> None:
        """Put the previous signal handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
