"""One writer of atomic, verified checkpoint directories (stdlib only).

Used by rl-collectors' run :class:`~rl_collectors.Checkpointer` and rl-replay's
``ReplayBuffer.dumps`` / ``loads``: the one package both depend on is rl-profiling, the
root of the graph, so the writer lives here (``docs/architecture.md``).

A directory ``root`` holds numbered snapshots ``root/ckpt-<n>`` and a pointer file
``root/LATEST``. A snapshot is written as ``ckpt-<n>.tmp`` (:meth:`AtomicDirectory.begin`);
:meth:`AtomicDirectory.commit` then writes ``manifest.json`` last, with the size and
SHA-256 of every file in the snapshot, fsyncs it, renames the folder into place, replaces
``LATEST`` atomically and only then removes snapshots beyond the ``keep`` newest. Killed at
any moment, ``LATEST`` names a complete snapshot (the previous one until the replace).

:meth:`AtomicDirectory.verify` checks a snapshot against its manifest: every file present
with its size, and its checksum unless the file was committed as ``size_only`` (large data
files: checked by checksum only on request). :meth:`AtomicDirectory.newest_valid` walks the
snapshots newest first and says which were skipped and why.

Every OS failure of a write goes through :func:`guard`, which raises the caller's error
type naming the path, the bytes wanted and the cause.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["LATEST", "MANIFEST", "AtomicDirectory", "file_record", "fsync_dir", "guard"]

LATEST = "LATEST"
"""The pointer file naming the newest complete snapshot."""
MANIFEST = "manifest.json"
"""Written last into each snapshot: its metadata and ``files`` (size and SHA-256 each)."""
_PREFIX, _TMP = "ckpt-", ".tmp"
_BLOCK = 1 << 20


@contextlib.contextmanager
def guard(path: Any, nbytes: int | None, error: type[Exception], action: str = "write",
          note: str = "nothing written there is used: the previous checkpoint stays the one "
          "loaded") -> Iterator:
    """Turn an ``OSError`` inside the block into ``error`` naming path, bytes and cause.

    Args:
        path: the file or folder being written.
        nbytes: the bytes the write wanted (``None``: not known).
        error: the caller's package error type (built from one message).
        action: the verb in the message.
        note: what the failure leaves, said after the cause.

    Raises:
        error: chained to the ``OSError`` (full disk, ``RLIMIT_FSIZE``, permissions).

    Examples:
        >>> import pytest
        >>> with pytest.raises(RuntimeError, match="write 3 bytes to /nonexistent/x"):
        ...     with guard("/nonexistent/x", 3, RuntimeError):
        ...         open("/nonexistent/x", "wb")
    """
    try:
        yield
    except OSError as err:
        wanted = f"{nbytes} bytes" if nbytes is not None else "its bytes"
        cause = err.strerror or str(err)
        raise error(f"{action} {wanted} to {path} failed: {cause} (errno {err.errno}); {note}") \
            from err


def fsync_dir(path: Path) -> None:
    """fsync a folder (its entries: a rename or a new file in it is durable after this)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_record(path: Path, *, size_only: bool = False) -> dict[str, Any]:
    """``{"size", "sha256", "check"}`` of a file (``check``: ``"size"`` or ``"sha256"``)."""
    return {"size": os.stat(path).st_size, "sha256": _sha256(path),
            "check": "size" if size_only else "sha256"}


def _number(name: str) -> int | None:
    digits = name.removeprefix(_PREFIX)
    return int(digits) if name.startswith(_PREFIX) and digits.isdigit() else None


class AtomicDirectory:
    """Numbered snapshots under ``root``, written atomically, verified on load.

    Args:
        root: the folder (created on the first :meth:`begin`).
        keep: complete snapshots kept after a commit (the newest ``keep``), >= 1.
        error: the package's error type raised for OS failures and bad snapshots.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> ckpts = AtomicDirectory(Path(tempfile.mkdtemp()), keep=2)
        >>> for text in ("a", "b", "c"):
        ...     tmp = ckpts.begin()
        ...     _ = (tmp / "state.txt").write_text(text)
        ...     final = ckpts.commit(tmp, {"format": 1})
        >>> [p.name for p in ckpts.snapshots()], ckpts.latest().name
        (['ckpt-000002', 'ckpt-000001'], 'ckpt-000002')
        >>> _ = (ckpts.latest() / "state.txt").write_text("cut")  # corrupt the newest
        >>> best, skipped = ckpts.newest_valid()
        >>> best.name, skipped[0][1]
        ('ckpt-000001', 'state.txt: expected 1 bytes, got 3')
    """

    def __init__(self, root: Any, *, keep: int = 2, error: type[Exception] = OSError) -> None:
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep: expected an int >= 1, got {keep!r}")
        self.root, self.keep, self.error = Path(root), keep, error

    def latest_name(self) -> str | None:
        """What ``LATEST`` names (``None``: there is no ``LATEST``)."""
        try:
            return (self.root / LATEST).read_text().strip()
        except FileNotFoundError:
            return None

    def latest(self) -> Path | None:
        """The snapshot ``LATEST`` names when it is complete (has its manifest)."""
        name = self.latest_name()
        if name is None or not (self.root / name / MANIFEST).is_file():
            return None
        return self.root / name

    def snapshots(self) -> list[Path]:
        """Committed snapshot folders (not ``.tmp``), newest first."""
        if not self.root.is_dir():
            return []
        found = [(n, p) for p in self.root.iterdir() if (n := _number(p.name)) is not None]
        return [p for _, p in sorted(found, reverse=True) if p.is_dir()]

    def base(self) -> Path | None:
        """The snapshot a new one may hard-link unchanged files from.

        With ``keep >= 2`` the second newest: it is removed by the commit, so the newest
        snapshot and the one before it never share a file (a truncation through one link
        cannot corrupt the fallback). With ``keep == 1`` the newest.
        """
        found = self.snapshots()
        index = 1 if self.keep >= 2 else 0
        return found[index] if len(found) > index else None

    def begin(self) -> Path:
        """A fresh ``ckpt-<n>.tmp`` folder for the next snapshot (``n``: above every one)."""
        with guard(self.root, None, self.error, "create the folder"):
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(f"{_PREFIX}*{_TMP}"):  # a save killed mid-write
                shutil.rmtree(stale, ignore_errors=True)
            numbers = [_number(p.name) for p in self.snapshots()]
            tmp = self.root / f"{_PREFIX}{max(numbers, default=-1) + 1:06d}{_TMP}"
            tmp.mkdir()
        return tmp

    def abort(self, tmp: Path) -> None:
        """Remove an unfinished snapshot (after a failed write)."""
        shutil.rmtree(tmp, ignore_errors=True)

    def commit(self, tmp: Path, manifest: dict[str, Any], *, size_only: Iterable[str] = (),
               exclude: Iterable[str] = (), base: Path | None = None) -> Path:
        """Write the manifest last, rename ``tmp`` into place, point ``LATEST`` at it, prune.

        Args:
            tmp: the folder :meth:`begin` returned, every file written and fsynced.
            manifest: metadata to store (``files`` is added).
            size_only: glob patterns (relative paths) of files checked by size on load
                and by checksum only on request.
            exclude: glob patterns of files not recorded (a nested snapshot folder
                with its own manifest).
            base: a snapshot files may be hard links of: their records are reused, not
                hashed again.

        Returns:
            The snapshot's final folder.

        Raises:
            error: an OS failure; ``tmp`` is removed and ``LATEST`` is unchanged.
        """
        final = tmp.with_name(tmp.name.removesuffix(_TMP))
        try:
            files = self._records(tmp, tuple(size_only), tuple(exclude), base)
            body = json.dumps({**manifest, "files": files}, indent=1).encode()
            with guard(tmp / MANIFEST, len(body), self.error):
                _write_durable(tmp / MANIFEST, body)
            with guard(final, None, self.error, "rename into place"):
                shutil.rmtree(final, ignore_errors=True)  # complete but never named
                os.rename(tmp, final)
                fsync_dir(self.root)
        except BaseException:
            self.abort(tmp)
            raise
        pointer = self.root / f"{LATEST}{_TMP}"
        with guard(pointer, len(final.name), self.error):
            _write_durable(pointer, final.name.encode())
            os.replace(pointer, self.root / LATEST)
            fsync_dir(self.root)
        for old in self.snapshots()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _records(self, tmp: Path, size_only: tuple[str, ...], exclude: tuple[str, ...],
                 base: Path | None) -> dict:
        known = _manifest(base).get("files", {}) if base is not None else {}
        records = {}
        for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
            rel = path.relative_to(tmp).as_posix()
            if rel == MANIFEST or any(fnmatch.fnmatch(rel, p) for p in exclude):
                continue
            linked = base is not None and rel in known and _same_file(path, base / rel)
            only = any(fnmatch.fnmatch(rel, pattern) for pattern in size_only)
            with guard(path, None, self.error, "read back"):
                records[rel] = dict(known[rel]) if linked else file_record(path, size_only=only)
        return records

    def verify(self, snapshot: Path, *, checksum: bool = False) -> str | None:
        """Why ``snapshot`` is not intact, or ``None`` when it is.

        Args:
            snapshot: a committed snapshot folder.
            checksum: check every file's SHA-256, ``size_only`` ones too.
        """
        try:
            manifest = _manifest(snapshot)
        except FileNotFoundError:
            return f"{MANIFEST}: missing (the folder is gone or was never completed)"
        except (OSError, ValueError) as err:
            return f"{MANIFEST}: unreadable ({err})"
        for rel, record in manifest.get("files", {}).items():
            problem = _check_file(snapshot / rel, record, checksum)
            if problem is not None:
                return f"{rel}: {problem}"
        return None

    def newest_valid(
        self, *, checksum: bool = False, check: Callable[[Path], str | None] | None = None
    ) -> tuple[Path | None, list[tuple[Path, str]]]:
        """The newest intact snapshot, and ``(snapshot, why)`` for each newer one skipped.

        A ``LATEST`` naming a folder that no longer exists counts as skipped too.

        Args:
            checksum: as for :meth:`verify`.
            check: a further check of a snapshot whose own files are intact (e.g. of
                nested snapshot folders): why it is not, or ``None``.
        """
        skipped: list[tuple[Path, str]] = []
        name = self.latest_name()
        found = self.snapshots()
        if name is not None and not (self.root / name).is_dir():
            skipped.append((self.root / name, "named by LATEST but the folder does not exist"))
        for snapshot in found:
            problem = self.verify(snapshot, checksum=checksum)
            if problem is None and check is not None:
                problem = check(snapshot)
            if problem is None:
                return snapshot, skipped
            skipped.append((snapshot, problem))
        return None, skipped


def _manifest(snapshot: Path) -> dict[str, Any]:
    return json.loads((snapshot / MANIFEST).read_text())


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_file(path: Path, record: dict[str, Any], checksum: bool) -> str | None:
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return "missing"
    if size != record["size"]:
        return f"expected {record['size']} bytes, got {size}"
    if (checksum or record.get("check") == "sha256") and _sha256(path) != record["sha256"]:
        return "checksum differs from the manifest's (the file was changed after the save)"
    return None


def _write_durable(path: Path, body: bytes) -> None:
    with open(path, "wb") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
