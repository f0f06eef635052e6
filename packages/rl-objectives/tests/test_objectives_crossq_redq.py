"""CrossQLoss (joint batch statistics, no targets) and REDQLoss (subset minimum), against
hand-written references; the new losses' named profiling ranges."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rl_objectives import CrossQLoss, REDQLoss
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

OBS, ACT, B = 3, 2, 8
HERE = Path(__file__).resolve().parent


def _actor():
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal),
    )


class BNQ(torch.nn.Module):
    """``Q(s, a) = w . BN([s, a]) + b`` with torch's batch norm (rl-modules' BatchRenorm1d
    is plain batch norm in its warm-up)."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(OBS + ACT)
        self.out = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, obs, act):
        return self.out(self.bn(torch.cat([obs, act], -1)))


class LinQ(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1))


def _critic(cls=BNQ):
    return TensorDictModule(cls(), ["observation", "action"], ["state_action_value"])


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(B, OBS, generator=g),
        "action": torch.randn(B, ACT, generator=g),
        "next": {"observation": torch.randn(B, OBS, generator=g) + 2.0,
                 "reward": torch.randn(B, 1, generator=g),
                 "done": torch.zeros(B, 1, dtype=torch.bool),
                 "terminated": (torch.arange(B) % 3 == 0).unsqueeze(-1)},
    }, [B])


def _bn_q(params, i, x):
    """Critic ``i`` on ``x`` normalised with the statistics of ``x`` itself (train mode)."""
    bn = params["module", "bn"]
    x_hat = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)
    x_hat = x_hat * bn["weight"][i] + bn["bias"][i]
    out = params["module", "out"]
    return (x_hat @ out["weight"][i].T + out["bias"][i]).squeeze(-1)


def test_crossq_normalises_s_and_next_s_as_one_batch():
    torch.manual_seed(0)
    loss = CrossQLoss(_actor(), _critic(), alpha_init=0.2, loss_function="l2", gamma=0.9)
    params = loss.qvalue_network_params.detach().clone()
    td = _batch()
    torch.manual_seed(7)
    out = loss(td)
    torch.manual_seed(7)  # the next action is the loss's first random draw
    nxt = td["next"]
    dist = loss.actor_network.get_dist(nxt.select("observation"))
    next_action = dist.rsample().detach()
    next_logp = dist.log_prob(next_action).sum(-1)
    x = torch.cat([torch.cat([td["observation"], td["action"]], -1),
                   torch.cat([nxt["observation"], next_action], -1)])  # [2B, 5]
    q = torch.stack([_bn_q(params, i, x) for i in range(2)])
    pred, q_next = q[:, :B], q[:, B:]
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * (
        q_next.amin(0) - 0.2 * next_logp)
    torch.testing.assert_close(out["loss_qvalue"], ((pred - y) ** 2).sum(0).mean())
    torch.testing.assert_close(td["td_error"], (pred - y).abs().amax(0))
    # separate batches would have given other values: the statistics are joint
    alone = torch.stack([_bn_q(params, i, x[:B]) for i in range(2)])
    assert not torch.allclose(alone, pred, atol=1e-3)
    # the running statistics moved towards the joint batch's mean (momentum 0.1), per critic
    torch.testing.assert_close(loss.qvalue_network_params["module", "bn", "running_mean"],
                               (0.1 * x.mean(0)).expand(2, -1))
    assert loss.target_pairs() == [] and not hasattr(loss, "target_qvalue_network_params")
    assert all(m.training for m in loss.qvalue_network.modules())  # eval mode undone


@pytest.mark.parametrize("cls", [CrossQLoss, REDQLoss])
def test_each_term_moves_only_its_own_parameters(cls):
    kwargs = {"num_qvalue_nets": 4, "sub_sample_len": 2} if cls is REDQLoss else {}
    loss = cls(_actor(), _critic(BNQ if cls is CrossQLoss else LinQ), **kwargs)
    params = loss.qvalue_network_params
    groups = {"actor": list(loss.actor_network.parameters()),
              "critic": [params[k] for k in params.keys(True, True) if params[k].is_floating_point()
                         and params[k].requires_grad],
              "alpha": [loss.log_alpha]}
    owner = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "alpha"}
    for key, name in owner.items():
        loss.zero_grad(set_to_none=True)
        loss(_batch())[key].backward()
        for group, tensors in groups.items():
            got = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in tensors]
            assert all(got) if group == name else not any(got), (key, group)


def _constant_critics(loss, online, target):
    """Critic ``i`` returns the constant ``online[i]`` (its target ``target[i]``)."""
    with torch.no_grad():
        for params, values in ((loss.qvalue_network_params, online),
                               (loss.target_qvalue_network_params, target)):
            params["module", "net", "weight"].zero_()
            params["module", "net", "bias"].copy_(torch.tensor(values).unsqueeze(-1))


def test_redq_target_is_the_minimum_over_a_random_subset():
    torch.manual_seed(0)
    loss = REDQLoss(_actor(), _critic(LinQ), num_qvalue_nets=5, sub_sample_len=2,
                    fixed_alpha=True, alpha_init=1e-9, min_alpha=None, max_alpha=None, gamma=1.0)
    target_values = [3.0, 1.0, 4.0, 2.0, 5.0]
    _constant_critics(loss, [10.0, 20.0, 30.0, 40.0, 50.0], target_values)
    td = _batch()
    td["next", "reward"].zero_()
    td["next", "terminated"].zero_()
    pair_minima = {min(p) for p in itertools.combinations(target_values, 2)}
    seen = set()
    for seed in range(60):
        torch.manual_seed(seed)
        out = loss(td)
        got = round(out["target_value"].item(), 4)
        torch.manual_seed(seed)  # redraw: the next action first, then the subset
        loss.actor_network.get_dist(td["next"].select("observation")).rsample()
        subset = loss.subset()
        assert got == min(target_values[i] for i in subset.tolist())
        seen.add(got)
    assert seen == pair_minima  # every subset size-2 minimum occurs, never the full min only
    # the actor sees the mean of all N online critics, not their minimum
    assert out["state_action_value_actor"].item() == pytest.approx(30.0)
    torch.testing.assert_close(td["td_error"], torch.full((B,), 50.0 - got))


def test_redq_and_crossq_arguments():
    with pytest.raises(ValueError, match="sub_sample_len"):
        REDQLoss(_actor(), _critic(LinQ), num_qvalue_nets=3, sub_sample_len=4)
    with pytest.raises(ValueError, match="gSDE"):
        REDQLoss(_actor(), _critic(LinQ), gSDE=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gsde'"):
        REDQLoss(_actor(), _critic(LinQ), gsde=True)
    assert REDQLoss(_actor(), _critic(LinQ), separate_losses=True, priority_key="p",
                    gSDE=False).tensor_keys.priority == "p"
    loss = REDQLoss(_actor(), _critic(LinQ))
    assert loss.qvalue_network_params.batch_size == (10,) and loss.sub_sample_len == 2
    assert "next.state_value" in loss(_batch()).keys()  # noqa: SIM118
    crossq = CrossQLoss(_actor(), _critic(), priority_key="prio", reduction="none")
    out = crossq(td := _batch())
    assert out["loss_qvalue"].shape == (B,) and "prio" in td.keys()  # noqa: SIM118


SCRIPT = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
import test_objectives_crossq_redq as cr
import test_objectives_discrete_sac_c51 as dc
import test_objectives_td3_ddpg as td3
from rl_objectives import (CrossQLoss, DDPGLoss, DiscreteSACLoss, DistributionalDQNLoss,
    REDQLoss, TD3Loss)

with torch.profiler.profile() as prof:
    TD3Loss(td3._actor(), td3._critic(), bounds=(-1, 1))(td3._batch())
    DDPGLoss(td3._actor(), td3._critic())(td3._batch())
    DiscreteSACLoss(dc._actor(), dc._q(), action_space="categorical")(dc._batch())
    b = dc._batch()
    b["action"] = b["action"] % 2
    DistributionalDQNLoss(dc._c51_net())(b)
    CrossQLoss(cr._actor(), cr._critic())(cr._batch())
    REDQLoss(cr._actor(), cr._critic(cr.LinQ), num_qvalue_nets=3)(cr._batch())
    t3 = TD3Loss(td3._actor(), td3._critic(), bounds=(-1, 1))
    t3.value_loss(td3._batch()), t3.actor_loss(td3._batch())
    cq = CrossQLoss(cr._actor(), cr._critic())
    cq.qvalue_loss(cr._batch()), cq.alpha_loss(cq.actor_loss(cr._batch())[1]["log_prob"])
names = [e.name for e in prof.events()]
print(json.dumps({n: names.count(n) for n in set(names) if "Loss." in n}))
"""


@pytest.mark.timeout(300)
def test_each_new_loss_records_its_named_range_when_armed():
    env = {**os.environ, "RL_PROFILING": "1"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(HERE)], env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("TD3Loss", "DDPGLoss", "DiscreteSACLoss", "DistributionalDQNLoss",
                 "CrossQLoss", "REDQLoss"):
        assert counts.get(f"{name}.forward") == 1, (name, counts)
    assert "SACLoss.forward" not in counts  # the subclasses are named after themselves
    # TorchRL's per-part methods: their own ranges (TD3's and DDPG's nested in forward)
    parts = {"TD3Loss.value_loss": 2, "TD3Loss.actor_loss": 2, "DDPGLoss.loss_value": 1,
             "DDPGLoss.loss_actor": 1, "CrossQLoss.qvalue_loss": 1, "CrossQLoss.actor_loss": 1,
             "CrossQLoss.alpha_loss": 1}
    assert {name: counts.get(name) for name in parts} == parts, counts
