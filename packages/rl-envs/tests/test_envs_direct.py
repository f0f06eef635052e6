"""``rl_envs._direct.unrolled``: a policy of nested sequences called member by member."""

from __future__ import annotations

import torch
from rl_envs._direct import unrolled
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential, set_skip_existing
from torch import nn


class _Scale(TensorDictModule):
    """Not plain (its own forward): called as the sequence calls it."""

    def forward(self, tensordict):
        tensordict.set("action", tensordict.get("action") * 2.0)
        return tensordict


def _policy():
    torch.manual_seed(0)
    net = TensorDictModule(nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)),
                           ["observation"], ["param"])
    squash = TensorDictModule(nn.Tanh(), ["param"], ["action"])
    return TensorDictSequential(TensorDictSequential(net, squash),
                                _Scale(nn.Identity(), ["action"], ["action"]))


def _input(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(observation=torch.randn(5, 3, generator=gen), batch_size=[5])


def test_the_unrolled_call_writes_what_the_sequences_write():
    policy = _policy()
    call = unrolled(policy)
    assert call is not policy
    for seed in range(3):
        a, b = _input(seed), _input(seed)
        assert call(a) is a  # in place, as the sequences write
        policy(b)
        assert set(a.keys()) == set(b.keys()) == {"observation", "param", "action"}
        for key in a.keys():  # noqa: SIM118 (a TensorDict)
            assert torch.equal(a[key], b[key]), key


def test_gradients_equal_the_generic_calls():
    policy = _policy()
    grads = []
    for call in (unrolled(policy), policy):
        policy.zero_grad(set_to_none=True)
        call(_input())["action"].sum().backward()
        grads.append([p.grad.clone() for p in policy.parameters()])
    for g, h in zip(*grads, strict=True):
        assert torch.equal(g, h)


def test_a_hook_or_skip_existing_sends_the_call_to_the_policy():
    policy = _policy()
    call = unrolled(policy)
    seen = []
    handle = policy[0].register_forward_hook(lambda *args: seen.append(1))  # after unrolling
    call(_input())
    assert seen == [1]  # the inner sequence was called: its hook ran
    handle.remove()
    call(_input())
    assert seen == [1]
    td = _input()
    td.set("param", torch.zeros(5, 2))
    td.set("action", torch.full((5, 2), 7.0))
    with set_skip_existing(True):  # tensordict skips what exists: the unrolled call too
        out = call(td)
    assert bool((out["param"] == 0).all())  # the network was skipped, as policy(td) skips it


def test_what_cannot_be_unrolled_is_returned_as_is():
    policy = _policy()
    assert unrolled(policy[1]) is policy[1]  # not a sequence
    selecting = TensorDictSequential(*policy[0], selected_out_keys=["action"])
    assert unrolled(selecting) is selecting  # out-key selection: tensordict's call
    outer = TensorDictSequential(selecting)
    assert unrolled(outer) is outer  # a member that cannot be unrolled: the whole sequence


def test_a_member_swapped_after_unrolling_is_the_one_called():
    policy = _policy()
    call = unrolled(policy)
    policy[1] = TensorDictModule(nn.Identity(), ["action"], ["action"])  # no more scaling
    a, b = _input(), _input()
    call(a)
    policy(b)
    assert torch.equal(a["action"], b["action"])
    policy[0].inplace = False  # an option changed: the sequences' own call, out of place
    td = _input()
    out = call(td)
    assert out is not td and "action" in out.keys() and "action" not in td.keys()  # noqa: SIM118
