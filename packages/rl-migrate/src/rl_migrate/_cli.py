"""``rl-migrate``: rewrite TorchRL imports to this toolkit's modules (``--check`` by default)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path

from rl_migrate._files import python_files, read_source, write_atomic
from rl_migrate._rewrite import Rewrite, rewrite_source
from rl_migrate.exceptions import MigrateError

__all__ = ["main", "migrate_paths"]

OK, GAPS, BAD_INPUT = 0, 1, 2


def migrate_paths(paths: Sequence[str]) -> tuple[list[Rewrite], list[str]]:
    """Rewrite every Python file under ``paths`` in memory.

    Returns:
        ``(rewrites, errors)``: one :class:`Rewrite` per readable file, and one message per
        input that could not be read (file, line and reason).
    """
    rewrites, errors = [], []
    for path in paths:
        try:
            files = python_files(path)
        except MigrateError as err:
            errors.append(str(err))
            continue
        for file in files:
            try:
                rewrites.append(rewrite_source(read_source(file), str(file)))
            except MigrateError as err:
                errors.append(str(err))
    return rewrites, errors


def _diff(r: Rewrite) -> str:
    return "".join(difflib.unified_diff(
        r.source.splitlines(keepends=True), r.new_source.splitlines(keepends=True),
        f"a/{r.path}", f"b/{r.path}"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 clean, 1 gaps, 2 bad input)."""
    parser = argparse.ArgumentParser(prog="rl-migrate", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="print the diff and what has no counterpart; write nothing (default)")
    mode.add_argument("--write", action="store_true", help="rewrite the files in place")
    parser.add_argument("paths", nargs="+", help="Python files or folders")
    args = parser.parse_args(argv)
    rewrites, errors = migrate_paths(args.paths)
    out = sys.stdout
    write = args.write and not errors  # an unreadable input: nothing is written at all
    for r in rewrites:
        if write and r.changed:
            write_atomic(Path(r.path), r.new_source)
        elif not args.write and r.changed:
            out.write(_diff(r))
        for finding in r.findings:
            out.write(f"{finding}\n")
    for message in errors:
        sys.stderr.write(f"rl-migrate: error: {message}\n")
    if args.write and errors:
        sys.stderr.write("rl-migrate: nothing written: fix or leave out the inputs above\n")
    gaps = sum(len(r.findings) for r in rewrites)
    changed = sum(r.changed for r in rewrites)
    verb = "rewritten" if write else "to rewrite"
    out.write(f"rl-migrate: {len(rewrites)} file(s) read, {changed} {verb}, {gaps} name(s) or "
              f"argument(s) with no counterpart, {len(errors)} unreadable\n")
    return BAD_INPUT if errors else GAPS if gaps else OK


if __name__ == "__main__":
    sys.exit(main())
