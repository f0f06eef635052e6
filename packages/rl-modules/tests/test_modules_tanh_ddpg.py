"""TanhDelta, TanhModule, DistributionalQValueActor/Module and TorchRL's DDPG networks."""

from __future__ import annotations

import pytest
import torch
from rl_envs import Binary, Bounded, Categorical, OneHot
from rl_modules import (
    MLP,
    DdpgMlpActor,
    DdpgMlpQNet,
    DistributionalQValueActor,
    DistributionalQValueModule,
    TanhDelta,
    TanhModule,
)
from rl_modules.exceptions import ActionSpecError
from tensordict import TensorDict


def test_tanh_delta_squashes_into_the_box_and_keeps_gradients():
    param = torch.tensor([[-50.0, 0.0, 0.5]], requires_grad=True)
    low, high = torch.tensor([-2.0, 0.0, 1.0]), torch.tensor([2.0, 4.0, 3.0])
    d = TanhDelta(param, low, high)
    expected = low + (high - low) * (torch.tanh(param) + 1) / 2
    torch.testing.assert_close(d.rsample(), expected)
    assert d.rsample().requires_grad and not d.sample().requires_grad
    assert d.log_prob(d.mode).item() == 0.0
    assert d.log_prob(d.mode + 0.1).item() == float("-inf")
    assert d.batch_shape == (1,) and d.event_shape == (3,)
    with pytest.raises(ValueError, match="low must be < high"):
        TanhDelta(param, 1.0, 1.0)


def test_tanh_module_reads_bounds_from_spec_and_clamps():
    spec = Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 10.0]), shape=(2,))
    td = TensorDict(raw=torch.tensor([[0.0, 0.0], [30.0, -30.0]]), batch_size=[2])
    out = TanhModule(["raw"], ["action"], spec=spec)(td)["action"]
    torch.testing.assert_close(out, torch.tensor([[0.0, 5.0], [1.0, 0.0]]))
    clamped = TanhModule(["raw"], ["action"], spec=spec, clamp=True)(td)["action"]
    assert (clamped[1, 0] < 1.0) and (clamped[1, 1] > 0.0)
    batched = TanhModule(["raw"], ["action"], spec=Bounded(-2.0, 2.0, shape=(4, 1)))
    big = TensorDict(raw=torch.zeros(64, 1), batch_size=[64])  # a minibatch, not 4 envs
    assert batched(big)["action"].shape == (64, 1)
    with pytest.raises(ValueError, match="Bounded"):
        TanhModule(["raw"], spec=Categorical(3))
    with pytest.raises(ValueError, match="out_keys"):
        TanhModule(["a", "b"], ["c"])


def test_distributional_actor_takes_the_mean_of_each_action_distribution():
    support = torch.tensor([-1.0, 0.0, 1.0])
    logits = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [3.0, 0.0]]])  # [B=1, N=3, A=2]
    head = DistributionalQValueModule(support=support)
    td = head(TensorDict(action_value=torch.log_softmax(logits, -2), batch_size=[1]))
    q = (torch.softmax(logits, -2) * support[:, None]).sum(-2)
    assert td["action"].item() == int(q.argmax(-1))
    torch.testing.assert_close(head.expected_values(td["action_value"]), q)
    actor = DistributionalQValueActor(MLP(4, (3, 2), num_cells=8, depth=1), support,
                                      spec=OneHot(2))
    out = actor(TensorDict(observation=torch.randn(5, 4), batch_size=[5]))
    assert out["action"].shape == (5, 2) and out["action"].sum(-1).eq(1).all()
    torch.testing.assert_close(out["action_value"].exp().sum(-2), torch.ones(5, 2))
    assert torch.equal(actor.support, support)


def test_distributional_bad_support():
    with pytest.raises(ValueError, match="support"):
        DistributionalQValueModule(support=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="var_nums"):
        DistributionalQValueModule(support=torch.tensor([0.0, 1.0]), var_nums=2)


def _greedy_per_block(log_probs, support, blocks):
    """Each block's argmax of the expected values, one sample and one block at a time."""
    out, start = [], 0
    for n in blocks:
        rows = []
        for b in range(log_probs.shape[0]):
            q = [float((log_probs[b, :, start + a].exp() * support).sum()) for a in range(n)]
            rows.append(max(range(n), key=q.__getitem__))
        out.append(rows)
        start += n
    return torch.tensor(out).T  # [B, K]


def test_distributional_mult_one_hot_and_binary_choose_inside_each_block():
    torch.manual_seed(0)
    support = torch.tensor([-1.0, 0.0, 2.0])
    logp = torch.log_softmax(torch.randn(6, 3, 5), dim=-2)
    multi = DistributionalQValueModule("mult-one-hot", support, var_nums=[2, 3])
    action = multi(TensorDict(action_value=logp, batch_size=[6]))["action"]
    best = _greedy_per_block(logp, support, [2, 3])
    expected = torch.cat([torch.nn.functional.one_hot(best[:, 0], 2),
                          torch.nn.functional.one_hot(best[:, 1], 3)], -1)
    assert torch.equal(action, expected) and multi.action_blocks == [2, 3]
    logp = torch.log_softmax(torch.randn(6, 3, 6), dim=-2)
    bits = DistributionalQValueModule(support=support, spec=Binary(3))  # inferred: binary
    action = bits(TensorDict(action_value=logp, batch_size=[6]))["action"]
    assert bits.action_space == "binary" and action.dtype == torch.int8
    assert torch.equal(action.long(), _greedy_per_block(logp, support, [2, 2, 2]))
    actor = DistributionalQValueActor(MLP(4, (3, 5), num_cells=8, depth=1), support,
                                      action_space="mult_one_hot", var_nums=[2, 3])
    out = actor(TensorDict(observation=torch.randn(7, 4), batch_size=[7]))
    assert out["action"].shape == (7, 5) and actor.action_blocks == [2, 3]
    assert out["action"][:, :2].sum(-1).eq(1).all() and out["action"][:, 2:].sum(-1).eq(1).all()


def test_distributional_multi_choice_bad_input():
    support = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="var_nums"):
        DistributionalQValueModule("mult-one-hot", support)
    with pytest.raises(ValueError, match="var_nums"):
        DistributionalQValueModule("mult-one-hot", support, var_nums=[3, 1])
    with pytest.raises(ValueError, match="Binary spec"):
        DistributionalQValueModule("binary", support, spec=OneHot(2))
    with pytest.raises(ValueError, match="action_mask_key"):
        DistributionalQValueModule("mult-one-hot", support, action_mask_key="mask", var_nums=2)
    multi = DistributionalQValueModule("mult-one-hot", support, var_nums=[2, 3])
    with pytest.raises(ActionSpecError, match="expected 5 columns"):
        multi(TensorDict(action_value=torch.zeros(1, 2, 4), batch_size=[1]))


def test_ddpg_networks_shapes_and_small_last_layer():
    actor = DdpgMlpActor(2, {"in_features": 3})
    assert actor(torch.randn(7, 3)).shape == (7, 2)
    assert actor.mlp[-1].weight.abs().max() <= 6e-3
    q = DdpgMlpQNet({"in_features": 3}, {"in_features": 400 + 2})
    assert q(torch.randn(7, 3), torch.randn(7, 2)).shape == (7, 1)
    assert [m.out_features for m in q.modules() if isinstance(m, torch.nn.Linear)] == [
        400, 300, 1]
    lazy = DdpgMlpQNet()
    assert lazy(torch.randn(2, 3), torch.randn(2, 1)).shape == (2, 1)


def test_tanh_module_spec_attribute_is_torchrls_composite():
    # TorchRL's td3 sota script reads actor[1].spec as TD3Loss's action_spec
    from rl_envs import Composite

    spec = Bounded(-2.0, 3.0, shape=(2,))
    m = TanhModule(["param"], ["action"], spec=spec)
    assert isinstance(m.spec, Composite) and m.spec["action"] is spec
    assert TanhModule(["param"], ["action"], spec=m.spec).spec is m.spec
    assert TanhModule(["param"], ["action"], low=-1.0, high=1.0).spec is None
