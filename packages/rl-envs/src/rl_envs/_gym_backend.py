"""``set_gym_backend`` / ``gym_backend``: TorchRL's backend switch, gymnasium only here."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["gym_backend", "set_gym_backend"]


def _backend_name(backend: Any) -> str:
    return backend.__name__ if isinstance(backend, ModuleType) else backend


class set_gym_backend:  # noqa: N801 (TorchRL's name)
    """TorchRL's ``set_gym_backend``: a context manager, decorator or ``.set()`` call.

    The envs here run on gymnasium only, so ``"gymnasium"`` (or the module) is accepted
    and changes nothing; any other backend (``"gym"``) is refused.

    Args:
        backend: ``"gymnasium"`` or the ``gymnasium`` module.

    Raises:
        ValueError: another backend.

    Examples:
        >>> with set_gym_backend("gymnasium"):
        ...     gym_backend().__name__
        'gymnasium'
        >>> set_gym_backend("gymnasium").set()
    """

    def __init__(self, backend: Any) -> None:
        name = _backend_name(backend)
        if name != "gymnasium":
            raise ValueError(
                f"set_gym_backend: backend must be 'gymnasium' (the only one here), received "
                f"{name!r}"
            )
        self.backend = backend

    def set(self) -> None:
        """Make the backend the default (it always is)."""

    def __enter__(self) -> set_gym_backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return wrapped


def gym_backend(submodule: str | None = None) -> ModuleType:
    """The gymnasium module, or one of its submodules (TorchRL's ``gym_backend``).

    Args:
        submodule: e.g. ``"spaces"`` or ``"wrappers"``.

    Returns:
        ``gymnasium`` or ``gymnasium.<submodule>``.
    """
    name = "gymnasium" if submodule is None else f"gymnasium.{submodule}"
    return importlib.import_module(name)
