"""rl-migrate: rewrite a TorchRL script's imports to this toolkit's modules.

``rl-migrate --check PATH...`` prints the diff and every TorchRL name or argument with no
counterpart here (file, line, symbol and the migration page's row); ``--write`` rewrites in
place. libcst keeps comments and layout.
"""

from __future__ import annotations

from rl_migrate._cli import main, migrate_paths
from rl_migrate._resolve import resolve, resolve_module
from rl_migrate._rewrite import Finding, Rewrite, rewrite_source
from rl_migrate.exceptions import MigrateError

__version__ = "0.1.0"

__all__ = [
    "Finding",
    "MigrateError",
    "Rewrite",
    "__version__",
    "main",
    "migrate_paths",
    "resolve",
    "resolve_module",
    "rewrite_source",
]
