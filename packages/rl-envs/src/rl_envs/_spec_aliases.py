"""TorchRL's pre-0.6 spec names, as aliases of the current ones (TorchRL keeps them,
deprecated, with the same constructor arguments)."""

from __future__ import annotations

from typing import Any

import torch

from rl_envs._composite import Composite
from rl_envs._specs import Bounded, Unbounded
from rl_envs._specs_discrete import Binary, Categorical, MultiCategorical, OneHot

__all__ = [
    "BinaryDiscreteTensorSpec",
    "BoundedTensorSpec",
    "CompositeSpec",
    "DiscreteTensorSpec",
    "MultiDiscreteTensorSpec",
    "OneHotDiscreteTensorSpec",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscreteTensorSpec",
]

BinaryDiscreteTensorSpec = Binary
BoundedTensorSpec = Bounded
CompositeSpec = Composite
DiscreteTensorSpec = Categorical
MultiDiscreteTensorSpec = MultiCategorical
OneHotDiscreteTensorSpec = OneHot
UnboundedContinuousTensorSpec = Unbounded


def UnboundedDiscreteTensorSpec(  # noqa: N802 (TorchRL's class name)
    shape: Any = (), device: Any = None, dtype: Any = torch.int64
) -> Unbounded:
    """TorchRL's ``UnboundedDiscreteTensorSpec``: an ``Unbounded`` spec, int64 by default.

    Examples:
        >>> UnboundedDiscreteTensorSpec((2,)).dtype
        torch.int64
    """
    return Unbounded(shape, device, dtype)
