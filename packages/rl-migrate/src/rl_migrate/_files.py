"""Reading the files to migrate (with clear errors) and writing them atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rl_migrate.exceptions import MigrateError

__all__ = ["python_files", "read_source", "write_atomic"]


def python_files(path: str | os.PathLike) -> list[Path]:
    """``path`` itself (a file), or every ``*.py`` under it (a folder), sorted.

    Raises:
        MigrateError: ``path`` does not exist, or is a folder with no Python file.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     python_files(d)
        Traceback (most recent call last):
        ...
        rl_migrate.exceptions.MigrateError: ...: no Python file (*.py) in this folder
    """
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.exists():
        raise MigrateError(f"{p}: no such file or folder")
    files = sorted(f for f in p.rglob("*.py") if f.is_file())
    if not files:
        raise MigrateError(f"{p}: no Python file (*.py) in this folder")
    return files


def read_source(path: Path) -> str:
    """The text of a Python file.

    Raises:
        MigrateError: the file is binary (a NUL byte) or not UTF-8 text; the message
            names the file and the byte offset.
    """
    data = path.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        raise MigrateError(f"{path}: not a Python source file (binary data: a NUL byte at "
                           f"offset {nul}); the file is left untouched")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise MigrateError(f"{path}: not UTF-8 text (byte offset {err.start}); the file is "
                           "left untouched") from None


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path``'s content with ``text`` in one rename (never half-written), keeping
    its permissions."""
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".rl-migrate")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
