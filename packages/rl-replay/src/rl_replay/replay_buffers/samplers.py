"""``torchrl.data.replay_buffers.samplers``'s path."""

from __future__ import annotations

from rl_replay._prioritized import PrioritizedSampler
from rl_replay._samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from rl_replay._slice import SliceSampler
from rl_replay._slice_prioritized import PrioritizedSliceSampler
from rl_replay._slice_wor import SliceSamplerWithoutReplacement

__all__ = [
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
]
