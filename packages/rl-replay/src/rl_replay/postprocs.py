"""``torchrl.data.postprocs``'s path: the collector post-processors."""

from __future__ import annotations

from rl_replay._multistep import MultiStep

__all__ = ["MultiStep"]
