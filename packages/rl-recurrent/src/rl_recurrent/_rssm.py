"""Dreamer's recurrent state-space model (RSSM): prior, posterior and rollout.

The modules live in :mod:`rl_recurrent._rssm_modules` and the rollout in
:mod:`rl_recurrent._rssm_rollout`; this module gathers them. See ``docs/rssm.md``.
"""

from __future__ import annotations

from rl_recurrent._rssm_modules import RSSMPosterior, RSSMPrior
from rl_recurrent._rssm_rollout import RSSMRollout

__all__ = ["RSSMPosterior", "RSSMPrior", "RSSMRollout"]
