"""Stacked critics: ``swap_call`` is ``functional_call`` eager; ``vmap_call`` stacks outputs."""

from __future__ import annotations

import pytest
import torch
from rl_objectives._ensemble import stack_copies, swap_call, vmap_call
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn


def _critic() -> TensorDictModule:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 1))
    return TensorDictModule(net, ["observation"], ["state_action_value"])


def _input() -> TensorDict:
    return TensorDict(observation=torch.randn(6, 4), batch_size=[6])


def test_swap_call_gives_functional_calls_outputs_gradients_and_buffers() -> None:
    critic, td = _critic(), _input()
    params = stack_copies(critic, 2)
    leaves = {".".join(k): v for k, v in params.items(include_nested=True, leaves_only=True)}
    own = {name: p.clone() for name, p in critic.state_dict().items()}
    trained = dict(critic.named_parameters())
    outs, grads, stats = [], [], []
    for call in (swap_call, torch.func.functional_call):
        member = {name: leaf[1].clone().requires_grad_(name in trained)
                  for name, leaf in leaves.items()}
        out = call(critic, member, (td.copy(),))["state_action_value"]
        out.sum().backward()
        outs.append(out)
        grads.append(member["module.0.weight"].grad)
        stats.append(member["module.2.running_mean"])  # BatchNorm updated it in place
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    torch.testing.assert_close(stats[0], stats[1], rtol=0, atol=0)
    assert stats[0].abs().sum() > 0  # the running mean moved: the swapped buffer was used
    for name, value in critic.state_dict().items():  # the template's own tensors put back
        torch.testing.assert_close(value, own[name], rtol=0, atol=0)
    assert isinstance(critic.module[0].weight, nn.Parameter)


def test_swap_call_puts_the_parameters_back_when_the_call_raises() -> None:
    critic = _critic()
    weight = critic.module[0].weight
    member = {"module.0.weight": torch.zeros(8, 4), "module.0.bias": torch.zeros(8)}
    bad = TensorDict(observation=torch.randn(6, 5), batch_size=[6])  # 5 features, not 4
    with pytest.raises(RuntimeError):
        swap_call(critic, member, (bad,))
    assert critic.module[0].weight is weight


def test_swap_call_falls_back_to_functional_call_on_tied_weights() -> None:
    tied = nn.Sequential(nn.Linear(3, 3, bias=False), nn.Linear(3, 3, bias=False))
    tied[1].weight = tied[0].weight  # one tensor under two names
    x = torch.randn(2, 3)
    new = {"0.weight": torch.eye(3) * 2}
    expected = torch.func.functional_call(tied, new, (x,))
    torch.testing.assert_close(swap_call(tied, new, (x,)), expected)
    torch.testing.assert_close(expected, 4 * x)  # both layers saw the new weight


def test_vmap_call_runs_each_copy_and_stacks_only_the_out_keys() -> None:
    critic, td = _critic(), _input()
    critic.eval()  # BatchNorm on its running statistics: each copy is a plain function
    params = stack_copies(critic, 3)
    out = vmap_call(critic, params, td)
    assert set(out.keys()) == {"state_action_value"}
    assert out.batch_size == torch.Size([3, 6])
    for i in range(3):
        member = {".".join(k): v[i] for k, v in params.items(True, True)}
        one = torch.func.functional_call(critic, member, (td.copy(),))
        torch.testing.assert_close(out["state_action_value"][i], one["state_action_value"])
    assert set(td.keys()) == {"observation"}  # the input is not written to
    assert not torch.equal(out["state_action_value"][0], out["state_action_value"][1])


def _sac_pair(hooked: bool):
    from rl_objectives import SACLoss
    from tensordict.nn import ProbabilisticTensorDictModule, ProbabilisticTensorDictSequential

    torch.manual_seed(0)

    class Q(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            return self.net(torch.cat([obs, act], -1))

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)

        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            loc, log_scale = self.net(obs).chunk(2, -1)
            return loc, log_scale.clamp(-3, 1).exp()

    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(Head(), ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal))
    critic = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
    if hooked:  # a forward hook: not plain, tensordict's own call
        critic.register_forward_hook(lambda module, args, out: out)
    return SACLoss(actor, critic, num_qvalue_nets=2, target_entropy=-1.0)


def test_plain_critics_are_called_on_tensors_with_the_same_values_and_gradients() -> None:
    from rl_objectives._ensemble import plain_network

    td = TensorDict({"observation": torch.randn(8, 4), "action": torch.randn(8, 1),
                     "next": {"observation": torch.randn(8, 4), "reward": torch.randn(8, 1),
                              "done": torch.zeros(8, 1, dtype=torch.bool),
                              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
    results = []
    for hooked in (False, True):
        loss = _sac_pair(hooked)
        assert (plain_network(loss.qvalue_network) is None) == hooked
        torch.manual_seed(1)
        out = loss(td.clone())
        total = out["loss_qvalue"] + out["loss_actor"]
        total.backward()
        grads = [p.grad.clone() for p in loss.qvalue_network_params.values(True, True)]
        results.append((out, grads))
    (plain, plain_grads), (generic, generic_grads) = results
    for key in ("loss_qvalue", "loss_actor", "loss_alpha"):
        assert torch.equal(plain[key], generic[key]), key
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, generic_grads, strict=True))


def test_members_read_a_tensordictparams_leaves_and_count_takes_the_first_copies() -> None:
    """``_members`` reads the stacked parameters through the TensorDict a
    ``TensorDictParams`` wraps (its own methods cost more than a small critic): the same
    leaves, whose views carry the gradient to the stacked parameter; ``count`` calls the
    first copies only, with the values of ``params[:count]``'s call."""
    from rl_objectives._ensemble import _members, stacked_calls

    critic, td = _critic(), _input()
    critic.eval()
    params = stack_copies(critic, 3)
    names, members = _members(params)
    assert names == [".".join(k) for k in params.keys(True, True)]
    assert len(members) == 3
    for name, view in zip(names, members[1], strict=True):
        stacked = params.get(tuple(name.split(".")))
        assert view.data_ptr() == stacked[1].data_ptr() and view.shape == stacked.shape[1:]
    obs = td["observation"]
    all_three = stacked_calls(critic, params, critic.module, [obs])
    first_two = stacked_calls(critic, params, critic.module, [obs], count=2)
    sliced = stacked_calls(critic, params[:2].detach(), critic.module, [obs])
    assert first_two.shape == (2, 6, 1)
    assert torch.equal(first_two, all_three[:2]) and torch.equal(first_two, sliced)
    first_two.sum().backward()
    weight = params.get(("module", "0", "weight"))
    assert weight.grad is not None
    assert weight.grad[:2].abs().sum() > 0 and torch.equal(weight.grad[2],
                                                           torch.zeros_like(weight.grad[2]))
