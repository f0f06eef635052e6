"""Actors, critics and Q-value modules against their specs, on every spec type."""

from __future__ import annotations

import pytest
import torch
from rl_envs import Binary, Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded
from rl_modules import (
    MLP,
    ActionSpecError,
    Actor,
    ActorCriticWrapper,
    ActorValueOperator,
    ExplorationType,
    IndependentNormal,
    MaskedCategorical,
    OneHotCategorical,
    ProbabilisticActor,
    QValueActor,
    QValueModule,
    SafeModule,
    TanhNormal,
    ValueOperator,
    event_spec,
    set_exploration_type,
)
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

B = 8


def _obs(n: int = 3, batch: int = B) -> TensorDict:
    return TensorDict(observation=torch.randn(batch, n), batch_size=[batch])


def _gaussian_actor(spec=None, dist=TanhNormal, **kwargs):
    net = nn.Sequential(nn.Linear(3, 4), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        spec=spec,
        distribution_class=dist,
        **{"return_log_prob": True, **kwargs},
    )


def test_event_spec_strips_batch_dims_of_every_spec_type():
    low, high = torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 3.0])
    cases = [
        (Bounded(low.expand(B, 2), high.expand(B, 2), shape=(B, 2)), (2,)),
        (Unbounded(shape=(B, 5)), (5,)),
        (Categorical(4, shape=(B,)), ()),
        (OneHot(4, shape=(B, 4)), (4,)),
        (Binary(3, shape=(B, 3)), (3,)),
        (MultiCategorical([2, 3], shape=(B, 2)), (2,)),
    ]
    for spec, shape in cases:
        one = event_spec(spec)
        assert (
            type(one) is type(spec) and one.shape == torch.Size(shape) and one.dtype == spec.dtype
        )
    assert torch.equal(event_spec(cases[0][0]).high, high)
    assert event_spec(cases[-1][0]).nvec.tolist() == [2, 3]


def test_tanh_actor_takes_its_bounds_from_the_env_spec():
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 10.0])
    actor = _gaussian_actor(Bounded(low.expand(B, 2), high.expand(B, 2), shape=(B, 2)))
    for batch in (B, 256):  # the collector's batch and a minibatch
        td = actor(_obs(batch=batch))
        assert td["action"].shape == (batch, 2) and td["sample_log_prob"].shape == (batch,)
        assert bool(((td["action"] > low) & (td["action"] < high)).all())
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        td = actor(_obs())
        torch.testing.assert_close(
            td["action"], low + (high - low) * (torch.tanh(td["loc"]) + 1) / 2
        )


def test_actor_output_outside_its_spec_is_caught_on_the_first_call():
    spec = Composite(action=Bounded(-1.0, 1.0, shape=(B, 2)), shape=(B,))
    actor = _gaussian_actor(spec, dist=IndependentNormal)
    actor.module[0].module[0].bias.data.fill_(50.0)  # loc far outside [-1, 1]
    with pytest.raises(
        ActionSpecError, match=r"'action': value out of bounds .* not in \[-1.0, 1.0\]"
    ):
        actor(_obs())


def test_safe_actor_projects_every_action_into_its_spec():
    actor = _gaussian_actor(Bounded(-1.0, 1.0, shape=(B, 2)), dist=IndependentNormal, safe=True)
    actor.module[0].module[0].bias.data.fill_(50.0)
    for _ in range(10):  # past the checked calls: projection is on every call
        assert bool((actor(_obs())["action"].abs() <= 1).all())


@pytest.mark.parametrize(
    ("spec", "dist", "n_out"),
    [
        (Categorical(4, shape=(B,)), torch.distributions.Categorical, 4),
        (OneHot(4, shape=(B, 4)), OneHotCategorical, 4),
    ],
)
def test_discrete_actors_fit_their_specs(spec, dist, n_out):
    head = TensorDictModule(nn.Linear(3, n_out), ["observation"], ["logits"])
    actor = ProbabilisticActor(
        head, ["logits"], spec=spec, distribution_class=dist, return_log_prob=True
    )
    for _ in range(6):
        td = actor(_obs())
        assert spec.is_in(td["action"].to(spec.dtype))


def test_a_float_action_for_a_discrete_spec_is_refused():
    actor = _gaussian_actor(Categorical(2, shape=(B,)), dist=IndependentNormal)
    with pytest.raises(
        ActionSpecError, match=r"expected torch.int64 values .* received torch.float32"
    ):
        actor(_obs())


def test_wrong_action_shape_is_refused_naming_the_key():
    actor = _gaussian_actor(Unbounded(shape=(B, 3)), dist=IndependentNormal)
    with pytest.raises(
        ActionSpecError, match=r"'action': expected a shape ending with \(3,\).* received \(8, 2\)"
    ):
        actor(_obs())


@pytest.mark.parametrize(
    "spec",
    [
        Bounded(-1.0, 1.0, shape=(B, 3)),
        Unbounded(shape=(B, 3)),
        OneHot(3, shape=(B, 3), dtype=torch.float32),
        Binary(3, shape=(B, 3), dtype=torch.float32),
    ],
)
def test_safe_module_projects_on_every_spec_type(spec):
    module = SafeModule(nn.Linear(3, 3), ["observation"], ["action"], spec=spec, safe=True)
    for _ in range(5):
        td = module(TensorDict(observation=10 * torch.randn(B, 3), batch_size=[B]))
        assert spec.is_in(td["action"].detach())


def test_safe_module_checks_integer_specs():
    for spec, bad in [(Categorical(3, shape=(B,)), 3), (MultiCategorical([2, 3], shape=(B, 2)), 5)]:
        shape = spec.shape[1:]
        module = SafeModule(
            lambda x, s=shape, v=bad: torch.full((x.shape[0], *s), v),
            ["observation"],
            ["action"],
            spec=spec,
        )
        with pytest.raises(ActionSpecError, match="out of range"):
            module(_obs())
        safe = SafeModule(
            lambda x, s=shape, v=bad: torch.full((x.shape[0], *s), v),
            ["observation"],
            ["action"],
            spec=spec,
            safe=True,
        )
        assert spec.is_in(safe(_obs())["action"])


def test_masked_actor_reads_the_env_mask():
    head = TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"])
    actor = ProbabilisticActor(
        head,
        {"logits": "logits", "mask": "action_mask"},
        distribution_class=MaskedCategorical,
        spec=Categorical(4, shape=(B,)),
    )
    mask = torch.zeros(B, 4, dtype=torch.bool)
    mask[:, 2] = True
    td = _obs().set("action_mask", mask)
    assert bool((actor(td)["action"] == 2).all())


def test_probabilistic_actor_refuses_a_plain_network():
    with pytest.raises(TypeError, match="module: expected a tensordict.nn module"):
        ProbabilisticActor(nn.Linear(3, 2), ["loc", "scale"], distribution_class=TanhNormal)


def test_value_operator_and_deterministic_actor_keys():
    v = ValueOperator(
        MLP(in_features=5, out_features=1, depth=1), in_keys=["observation", "action"]
    )
    td = v(TensorDict(observation=torch.randn(B, 3), action=torch.randn(B, 2), batch_size=[B]))
    assert v.out_keys == ["state_action_value"] and "state_action_value" in td
    actor = Actor(nn.Linear(3, 2), spec=Bounded(-1.0, 1.0, shape=(2,)), safe=True)
    assert bool(
        (
            actor(TensorDict(observation=99 * torch.ones(B, 3), batch_size=[B]))["action"].abs()
            <= 1
        ).all()
    )


def test_qvalue_module_categorical_one_hot_and_mask():
    values = torch.tensor([[0.1, 2.0, 0.3], [5.0, -1.0, 0.0]])
    td = QValueModule(spec=Categorical(3, shape=(2,)))(
        TensorDict(action_value=values.clone(), batch_size=[2])
    )
    assert td["action"].tolist() == [1, 0] and td["chosen_action_value"].tolist() == [[2.0], [5.0]]
    one_hot = QValueModule(spec=OneHot(3, shape=(2, 3)))(
        TensorDict(action_value=values.clone(), batch_size=[2])
    )
    assert one_hot["action"].dtype == torch.bool and one_hot["action"].long().tolist() == [
        [0, 1, 0],
        [1, 0, 0],
    ]
    mask = torch.tensor([[True, False, True], [False, True, True]])
    masked = QValueModule(action_mask_key="action_mask")(
        TensorDict(action_value=values.clone(), action_mask=mask, batch_size=[2]))
    assert masked["action"].tolist() == [2, 2]


def test_qvalue_actor_writes_what_dqn_reads():
    actor = QValueActor(nn.Linear(4, 2), spec=Categorical(2, shape=(B,)))
    td = actor(TensorDict(observation=torch.randn(B, 4), batch_size=[B]))
    assert td["action"].shape == (B,) and td["action_value"].shape == (B, 2)
    torch.testing.assert_close(
        td["chosen_action_value"].squeeze(-1), td["action_value"].max(-1).values
    )


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"action_space": "gaussian"}, "action_space: expected one of"),
    ({"spec": Bounded(-1.0, 1.0, shape=(2,))}, "cannot be inferred from a Bounded spec"),
])
def test_qvalue_module_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QValueModule(**kwargs)


def test_actor_value_operator_shares_the_trunk():
    trunk = TensorDictModule(nn.Linear(4, 8), ["observation"], ["hidden"])
    policy = ProbabilisticActor(
        TensorDictModule(nn.Linear(8, 2), ["hidden"], ["logits"]),
        ["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    value = ValueOperator(nn.Linear(8, 1), in_keys=["hidden"])
    model = ActorValueOperator(trunk, policy, value)
    pol, val = model.get_policy_operator(), model.get_value_operator()
    td = TensorDict(observation=torch.randn(5, 4), batch_size=[5])
    assert pol.get_dist(td.clone()).probs.shape == (5, 2)
    assert val(td.clone())["state_value"].shape == (5, 1)
    assert pol.module[0] is val.module[0] is trunk  # one trunk, one set of parameters
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == (4 * 8 + 8) + (8 * 2 + 2) + (8 + 1)
    wrapper = ActorCriticWrapper(policy, value)
    assert wrapper.get_policy_operator() is policy and wrapper.get_value_operator() is value
    with pytest.raises(TypeError, match="value_operator: expected a tensordict.nn module"):
        ActorValueOperator(trunk, policy, nn.Linear(8, 1))


def _fast_and_generic(actor, obs):
    from tensordict.nn import ProbabilisticTensorDictSequential

    with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
        torch.manual_seed(7)
        fast = actor(obs.clone())
        torch.manual_seed(7)
        generic = ProbabilisticTensorDictSequential.forward(actor, obs.clone())
        if actor._guard.active:
            generic = actor._guard(generic)
    return fast, generic


@pytest.mark.parametrize("batch", [[B], [2, B], []])
@pytest.mark.parametrize("dist", [TanhNormal, IndependentNormal, "categorical"])
def test_the_collectors_fast_path_equals_tensordicts_forward(dist, batch):
    if dist == "categorical":
        head = TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"])
        actor = ProbabilisticActor(
            head,
            ["logits"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
        )
    else:
        actor = _gaussian_actor(None, dist=dist)
    obs = TensorDict(observation=torch.randn(*batch, 3), batch_size=batch)
    fast, generic = _fast_and_generic(actor, obs)
    assert actor._lean
    # an IndependentNormal is drawn without building it (IndependentNormal.draw)
    assert (actor._normal_keys is not None) == (dist is IndependentNormal)
    for key in ("action", "sample_log_prob"):
        assert torch.equal(fast[key], generic[key]), key  # bit for bit


class _ShiftedNormal(IndependentNormal):
    """A subclass with its own log-prob: the direct draw must not bypass it."""

    def log_prob(self, value):
        return super().log_prob(value) + 1.0


def test_the_direct_normal_draw_keeps_subclasses_kwargs_and_grad_on_the_generic_path():
    shifted = _gaussian_actor(None, dist=_ShiftedNormal)
    assert shifted._normal_keys is None
    fast, generic = _fast_and_generic(shifted, _obs())
    assert torch.equal(fast["sample_log_prob"], generic["sample_log_prob"])
    actor = _gaussian_actor(None, dist=IndependentNormal)
    with set_exploration_type(ExplorationType.RANDOM):  # autograd on: a distribution's rsample
        out = actor(_obs())
    assert out["action"].requires_grad and out["sample_log_prob"].requires_grad


@pytest.mark.parametrize("dist", [TanhNormal, IndependentNormal])
def test_the_fast_path_with_a_safe_spec_and_without_log_prob(dist):
    spec = Bounded(-0.5, 0.5, shape=(B, 2))
    for kwargs in ({"spec": spec, "safe": True}, {"spec": None, "return_log_prob": False}):
        actor = _gaussian_actor(dist=dist, **kwargs)
        fast, generic = _fast_and_generic(actor, _obs())
        assert actor._lean and torch.equal(fast["action"], generic["action"])
        assert set(fast.keys()) == set(generic.keys())
        if kwargs.get("safe"):
            assert bool((fast["action"].abs() <= 0.5).all())
            assert torch.equal(fast["sample_log_prob"], generic["sample_log_prob"])


def test_the_fast_path_keeps_a_hooked_network_and_a_missing_input_generic():
    """The network runs on its tensors only when that is what its call does: a forward
    hook still runs (and changes the output), a missing in-key raises tensordict's error."""
    actor = _gaussian_actor()
    net = actor.module[0]
    fast, generic = _fast_and_generic(actor, _obs())
    assert torch.equal(fast["loc"], generic["loc"]) and "action" in fast

    def shift(module, args, out):
        out.set("loc", out.get("loc") + 100.0)
        return out

    handle = net.register_forward_hook(shift)
    try:
        fast, generic = _fast_and_generic(actor, _obs())
    finally:
        handle.remove()
    assert torch.equal(fast["loc"], generic["loc"]) and bool((fast["loc"] > 50).all())
    with set_exploration_type(ExplorationType.RANDOM), pytest.raises(KeyError):
        actor(TensorDict(other=torch.zeros(B, 3), batch_size=[B]))


class _JointNormal(IndependentNormal):
    """Scores its draw with its own ``rsample_and_log_prob`` (as tensordict's composites)."""

    def rsample_and_log_prob(self, sample_shape=()):
        value = self.rsample(sample_shape)
        return value, torch.zeros(value.shape[:-1])


def test_distributions_the_fast_path_does_not_take():
    import functools

    factory = functools.partial(IndependentNormal, event_dim=1)  # a callable, not a class
    for dist in (factory, _JointNormal):
        actor = _gaussian_actor(None, dist=dist)
        assert not actor._lean
        with set_exploration_type(ExplorationType.RANDOM), torch.no_grad():
            out = actor(_obs())
        assert out["action"].shape == (B, 2) and out["sample_log_prob"].shape == (B,)
    assert torch.equal(out["sample_log_prob"], torch.zeros(B))  # the joint method's score


class _SeesInteraction(nn.Module):
    """Records the interaction type its forward runs under."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.seen = nn.Linear(3, 2), []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from tensordict.nn import interaction_type

        self.seen.append(interaction_type())
        return self.net(x)


def test_get_dist_matches_tensordicts_generic_path() -> None:
    from tensordict.nn import ProbabilisticTensorDictSequential as Generic

    net = _SeesInteraction()
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), ["logits"],
                               distribution_class=torch.distributions.Categorical,
                               return_log_prob=True)
    td = TensorDict(observation=torch.randn(5, 3), batch_size=[5])
    ours, generic = td.clone(), td.clone()
    for kind in (None, ExplorationType.DETERMINISTIC):
        with set_exploration_type(kind):
            dist = actor.get_dist(ours)
            ref = Generic.build_dist_from_params(actor, Generic.get_dist_params(actor, generic))
        assert type(dist) is type(ref) and torch.equal(dist.logits, ref.logits)
        assert set(ours.keys()) == set(generic.keys()) == {"observation", "logits"}
    assert net.seen[0] == net.seen[1] == actor.module[-1].default_interaction_type
    assert net.seen[2] == net.seen[3] == ExplorationType.DETERMINISTIC
    out = TensorDict(batch_size=[5])  # the generic path: the parameters go to tensordict_out
    dist = actor.get_dist(td, out)
    ref = torch.distributions.Categorical(logits=out["logits"])
    assert torch.equal(dist.logits, ref.logits) and "logits" not in td


def test_a_plain_safe_module_runs_its_network_directly_with_the_same_result():
    # SafeModule's forward skips tensordict's dispatch when the call is plain; a hook sends
    # it through tensordict's forward: both give the same values, gradients and guard
    torch.manual_seed(0)
    spec = Bounded(-1.0, 1.0, shape=(2,))
    direct = SafeModule(nn.Linear(3, 2), ["observation"], ["action"], spec=spec, safe=True)
    generic = SafeModule(nn.Linear(3, 2), ["observation"], ["action"], spec=spec, safe=True)
    generic.load_state_dict(direct.state_dict())
    generic.register_forward_pre_hook(lambda module, args: None)
    obs = 10 * torch.randn(4, 3)
    outs = []
    for module in (direct, generic):
        td = TensorDict(observation=obs, batch_size=[4])
        assert module(td) is td
        td["action"].sum().backward()
        outs.append((td["action"], module.weight.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert bool((outs[0][0].abs() <= 1).all())  # projected into the spec either way
