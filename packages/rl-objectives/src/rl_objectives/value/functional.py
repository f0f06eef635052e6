"""Pure return and advantage estimators (rlax style): tensors in, tensors out.

Every function takes TorchRL's argument names and ``time_dim=-2`` (the layout
``[*B, T, 1]`` of a reward leaf in a ``[*B, T]`` TensorDict). The ``vec_*`` functions and
:func:`vtrace_advantage_estimate` solve the backward recurrences with a chunked log-depth
scan; the others loop over time and serve as the reference.
"""

from __future__ import annotations

from rl_objectives.value._gae import (
    generalized_advantage_estimate,
    vec_generalized_advantage_estimate,
)
from rl_objectives.value._scan import reverse_linear_scan
from rl_objectives.value._td import (
    td0_advantage_estimate,
    td0_return_estimate,
    td1_advantage_estimate,
    td1_return_estimate,
    td_lambda_advantage_estimate,
    td_lambda_return_estimate,
    vec_td1_advantage_estimate,
    vec_td1_return_estimate,
    vec_td_lambda_advantage_estimate,
    vec_td_lambda_return_estimate,
)
from rl_objectives.value._vtrace import vtrace_advantage_estimate

vtrace = vtrace_advantage_estimate

__all__ = [
    "generalized_advantage_estimate",
    "reverse_linear_scan",
    "td0_advantage_estimate",
    "td0_return_estimate",
    "td1_advantage_estimate",
    "td1_return_estimate",
    "td_lambda_advantage_estimate",
    "td_lambda_return_estimate",
    "vec_generalized_advantage_estimate",
    "vec_td1_advantage_estimate",
    "vec_td1_return_estimate",
    "vec_td_lambda_advantage_estimate",
    "vec_td_lambda_return_estimate",
    "vtrace",
    "vtrace_advantage_estimate",
]
