"""Batched environments, specs, transforms and a gymnasium wrapper at near-raw speed."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
