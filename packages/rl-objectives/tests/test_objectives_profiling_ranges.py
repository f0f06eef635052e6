"""Named ranges of rl-objectives reach a torch.profiler trace when RL_PROFILING=1.

Every loss's ``forward`` (named after the concrete class, a user's subclass included),
the estimators' ``forward`` and ``value_estimate``, the target updaters' ``step`` and
``compile_with_warmup``'s compile step. Not armed, the methods are the plain functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCRIPT = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from test_objectives_losses import _actor, _critic, _q, _rollout
from test_objectives_sac import _actor as sac_actor, _batch, _qvalue
from rl_objectives import (A2CLoss, ClipPPOLoss, DQNLoss, GAE, HardUpdate, KLPENPPOLoss,
    SACLoss, SoftUpdate, TD0Estimator, TD1Estimator, TDLambdaEstimator, compile_with_warmup)

class MyLoss(ClipPPOLoss):
    pass

td = _rollout()
with torch.profiler.profile() as prof:
    GAE(gamma=0.9, lmbda=0.8, value_network=_critic())(td)
    for estimator in (TD0Estimator(gamma=0.9, value_network=_critic()),
                      TD1Estimator(gamma=0.9, value_network=_critic()),
                      TDLambdaEstimator(gamma=0.9, lmbda=0.8, value_network=_critic())):
        estimator.value_estimate(td.clone())
    for cls in (ClipPPOLoss, KLPENPPOLoss, A2CLoss, MyLoss):
        cls(_actor(), _critic())(td.clone())
    dqn = DQNLoss(_q(), gamma=0.9)
    dqn(_rollout()[:, 0].set("action", torch.zeros(4, dtype=torch.long)))
    SoftUpdate(dqn, tau=0.5).step()
    HardUpdate(dqn, value_network_update_interval=1).step()
    SACLoss(sac_actor(), _qvalue())(_batch(4))
    f = compile_with_warmup(lambda x: x * 2, warmup=1, backend="eager")
    f(torch.ones(3)); f(torch.ones(3)); f(torch.ones(3))
names = [e.name for e in prof.events()]
print(json.dumps({n: names.count(n) for n in set(names)\
 if not n.startswith(("aten::", "autograd"))}))
"""

EXPECTED = {
    "GAE.forward": 1,
    "TD0Estimator.value_estimate": 1,
    "TD1Estimator.value_estimate": 1,
    "TDLambdaEstimator.value_estimate": 1,
    "ClipPPOLoss.forward": 1,
    "KLPENPPOLoss.forward": 1,
    "A2CLoss.forward": 1,
    "MyLoss.forward": 1,  # a user's subclass gets its own name, not its parent's
    "DQNLoss.forward": 1,
    "SoftUpdate.step": 1,
    "HardUpdate.step": 1,
    "SACLoss.forward": 1,
    "compile_with_warmup.compile": 1,  # the call that compiles, not the eager or later ones
}


@pytest.mark.timeout(300)
def test_ranges_recorded_when_armed() -> None:
    env = {**os.environ, "RL_PROFILING": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(HERE)],
        env=env, capture_output=True, text=True, timeout=280,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert {name: counts.get(name, 0) for name in EXPECTED} == EXPECTED
    assert "PPOLoss.forward" not in counts  # the inherited forward is not wrapped twice


def test_unarmed_methods_are_plain_functions() -> None:
    import rl_profiling
    from rl_objectives import GAE, ClipPPOLoss
    from rl_objectives._ppo import PPOLoss

    if rl_profiling.ARMED:
        pytest.skip("this process is armed")
    assert ClipPPOLoss.forward is PPOLoss.__dict__["forward"]
    assert "forward" not in ClipPPOLoss.__dict__ and "forward" not in GAE.__dict__
