"""Policy and value building blocks (TorchRL names and meaning) on ``tensordict.nn``:
distributions, actors and critics, models and exploration modules.

``Delta``, ``OneHotCategorical`` and ``NormalParamExtractor`` are ``tensordict.nn``'s own,
re-exported so that one import serves a TorchRL user's first ten lines.
"""

from __future__ import annotations

from tensordict.nn import NormalParamExtractor
from tensordict.nn.distributions import Delta, OneHotCategorical

from rl_modules._actor_value import ActorCriticWrapper, ActorValueOperator
from rl_modules._actors import Actor, ProbabilisticActor, SafeModule, ValueOperator
from rl_modules._batchrenorm import BatchRenorm1d
from rl_modules._ddpg_nets import DdpgMlpActor, DdpgMlpQNet
from rl_modules._distributional_qvalue import (
    DistributionalQValueActor,
    DistributionalQValueModule,
)
from rl_modules._distributions_continuous import IndependentNormal, TanhNormal, TruncatedNormal
from rl_modules._distributions_discrete import MaskedCategorical
from rl_modules._exploration import (
    AdditiveGaussianModule,
    EGreedyModule,
    ExplorationType,
    OrnsteinUhlenbeckProcessModule,
    exploration_type,
    set_exploration_type,
)
from rl_modules._models import MLP, ConvNet, DuelingCnnDQNet, NatureCNN, SquashDims
from rl_modules._noisy import NoisyLinear, reset_noise
from rl_modules._onednn import OneDNNLinear, onednn_linears
from rl_modules._qvalue import QValueActor, QValueModule
from rl_modules._spec_guard import event_spec
from rl_modules._tanh import TanhDelta, TanhModule
from rl_modules.exceptions import ActionSpecError

__version__ = "0.1.0"

__all__ = [
    "ActionSpecError",
    "Actor",
    "ActorCriticWrapper",
    "ActorValueOperator",
    "AdditiveGaussianModule",
    "BatchRenorm1d",
    "ConvNet",
    "DdpgMlpActor",
    "DdpgMlpQNet",
    "Delta",
    "DistributionalQValueActor",
    "DistributionalQValueModule",
    "DuelingCnnDQNet",
    "EGreedyModule",
    "ExplorationType",
    "IndependentNormal",
    "MLP",
    "MaskedCategorical",
    "NatureCNN",
    "NoisyLinear",
    "NormalParamExtractor",
    "OneDNNLinear",
    "OneHotCategorical",
    "OrnsteinUhlenbeckProcessModule",
    "ProbabilisticActor",
    "QValueActor",
    "QValueModule",
    "SafeModule",
    "SquashDims",
    "TanhDelta",
    "TanhModule",
    "TanhNormal",
    "TruncatedNormal",
    "ValueOperator",
    "__version__",
    "event_spec",
    "exploration_type",
    "onednn_linears",
    "reset_noise",
    "set_exploration_type",
]
