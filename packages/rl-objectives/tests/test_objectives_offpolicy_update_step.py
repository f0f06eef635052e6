"""The new off-policy losses through ``make_update_step`` (issue 40's learner step): one
call steps the optimiser on the sum of their ``loss_*`` terms and the target updater."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from rl_objectives import (
    CrossQLoss,
    DDPGLoss,
    DiscreteSACLoss,
    DistributionalDQNLoss,
    REDQLoss,
    SoftUpdate,
    TD3Loss,
    make_update_step,
)


def _sibling(name: str):
    """A sibling test module (its networks and batches); tests run in importlib mode."""
    spec = importlib.util.spec_from_file_location(f"_{name}", Path(__file__).with_name(
        f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cr = _sibling("test_objectives_crossq_redq")
dc = _sibling("test_objectives_discrete_sac_c51")
td3 = _sibling("test_objectives_td3_ddpg")


def _c51_batch():
    batch = dc._batch()
    batch["action"] = batch["action"] % 2
    return batch


CASES = {
    "TD3Loss": (lambda: TD3Loss(td3._actor(), td3._critic(), bounds=(-1, 1)), td3._batch),
    "DDPGLoss": (lambda: DDPGLoss(td3._actor(), td3._critic()), td3._batch),
    "DiscreteSACLoss": (lambda: DiscreteSACLoss(dc._actor(), dc._q(), action_space="categorical"),
                        dc._batch),
    "DistributionalDQNLoss": (lambda: DistributionalDQNLoss(dc._c51_net()), _c51_batch),
    "CrossQLoss": (lambda: CrossQLoss(cr._actor(), cr._critic()), cr._batch),
    "REDQLoss": (lambda: REDQLoss(cr._actor(), cr._critic(cr.LinQ), num_qvalue_nets=3),
                 cr._batch),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_runs_through_the_update_step(name: str) -> None:
    torch.manual_seed(0)
    make_loss, make_batch = CASES[name]
    loss = make_loss()
    trained = [p for p in loss.parameters() if p.requires_grad]
    optim = torch.optim.Adam(trained, lr=1e-2)
    updater = SoftUpdate(loss, tau=0.5) if loss.target_pairs() else None
    step = make_update_step(loss, optim, target_updater=updater, max_grad_norm=10.0)
    before = [p.detach().clone() for p in trained]
    targets = [t.detach().clone() for _, ts in loss.target_pairs() for t in ts]
    out = step(make_batch())
    assert "grad_norm" in out.keys()  # noqa: SIM118 (a TensorDict)
    assert all(not v.requires_grad for v in out.values())
    assert all(not torch.equal(b, p) for b, p in zip(before, trained, strict=True)), name
    moved = [t for _, ts in loss.target_pairs() for t in ts]
    assert all(not torch.equal(a, b) for a, b in zip(targets, moved, strict=True)), name
