"""Optional backends, imported lazily: a missing one raises an error naming its extra."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from rl_record.exceptions import MissingBackendError

__all__ = ["require"]


def require(module: str, extra: str, who: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingBackendError` naming ``rl-record[extra]``."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise MissingBackendError(
            f"{who} needs the {module.split('.')[0]!r} package, which is not installed: "
            f"install it with `pip install rl-record[{extra}]`"
        )
    return importlib.import_module(module)
