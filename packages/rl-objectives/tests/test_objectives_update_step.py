"""make_update_step: eager semantics, compiled == eager on every loss, recompiles, CUDA graphs.

Every loss of the package goes through the same builder, issue 37's (TD3, DDPG, discrete
SAC, C51, CrossQ, REDQ) included.

Compiled tests use ``backend="aot_eager"``: AOT autograd traces forward and backward as
``torch.compile`` does, without inductor's C++ build (about 50 s per graph on this CPU
under load; the examples and ``benchmarks/bench_update.py`` run inductor). Tolerance:
after 3 SGD-with-momentum updates (lr 0.1), parameters agree to ``rtol=1e-4, atol=1e-5``
(float32; the traced graph may reorder reductions). SGD, not Adam: Adam's normalised step
turns float32 noise in a near-zero gradient component into a full ``lr``-sized move.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from rl_objectives import (
    A2CLoss,
    ClipPPOLoss,
    CQLLoss,
    CrossQLoss,
    DDPGLoss,
    DiscreteSACLoss,
    DistributionalDQNLoss,
    DQNLoss,
    HardUpdate,
    IQLLoss,
    KLPENPPOLoss,
    PPOLoss,
    REDQLoss,
    SACLoss,
    SoftUpdate,
    TD3BCLoss,
    TD3Loss,
    make_update_step,
)
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch._dynamo.utils import counters

OBS, ACT, N = 3, 2, 16


class _Q(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1))


def _gaussian_actor():
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"], return_log_prob=True,
                                      distribution_class=torch.distributions.Normal))


def _critic():
    return TensorDictModule(torch.nn.Linear(OBS, 1), ["observation"], ["state_value"])


def _batch(seed: int, n: int = N) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(n, 1, generator=g) < 0.2
    return TensorDict({
        "observation": torch.randn(n, OBS, generator=g),
        "action": torch.randn(n, ACT, generator=g),
        "sample_log_prob": -torch.rand(n, generator=g),
        "advantage": torch.randn(n, 1, generator=g),
        "value_target": torch.randn(n, 1, generator=g),
        "next": {"observation": torch.randn(n, OBS, generator=g),
                 "reward": torch.randn(n, 1, generator=g), "done": done, "terminated": done},
    }, [n])


def _dqn_batch(seed: int, n: int = N) -> TensorDict:
    td = _batch(seed, n).exclude("sample_log_prob", "advantage", "value_target")
    td["action"] = torch.randint(0, ACT, (n,), generator=torch.Generator().manual_seed(seed))
    return td


def _dqn():
    net = TensorDictModule(torch.nn.Linear(OBS, ACT), ["observation"], ["action_value"])
    loss = DQNLoss(net, action_space="categorical", delay_value=True)
    return loss, HardUpdate(loss, value_network_update_interval=2), _dqn_batch


def _qvalue(q: torch.nn.Module | None = None):
    return TensorDictModule(q or _Q(), ["observation", "action"], ["state_action_value"])


def _sac():
    loss = SACLoss(_gaussian_actor(), _qvalue())
    return loss, SoftUpdate(loss, tau=0.1), _batch


def _soft(loss):
    return loss, SoftUpdate(loss, tau=0.1), _batch


class _BNQ(torch.nn.Module):  # CrossQ's critic: batch norm over [s, a]
    def __init__(self):
        super().__init__()
        self.bn, self.out = torch.nn.BatchNorm1d(OBS + ACT), torch.nn.Linear(OBS + ACT, 1)

    def forward(self, observation, action):
        return self.out(self.bn(torch.cat([observation, action], -1)))


def _deterministic_actor():
    return TensorDictModule(torch.nn.Sequential(torch.nn.Linear(OBS, ACT), torch.nn.Tanh()),
                            ["observation"], ["action"])


def _discrete_sac():
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Linear(OBS, ACT), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(["logits"], ["action"],
                                      distribution_class=torch.distributions.Categorical))
    q = TensorDictModule(torch.nn.Linear(OBS, ACT), ["observation"], ["action_value"])
    loss = DiscreteSACLoss(actor, q, action_space="categorical")
    return loss, SoftUpdate(loss, tau=0.1), _dqn_batch


def _c51(atoms: int = 5):
    net = torch.nn.Sequential(torch.nn.Linear(OBS, atoms * ACT),
                              torch.nn.Unflatten(-1, (atoms, ACT)), torch.nn.LogSoftmax(dim=-2))
    module = TensorDictModule(net, ["observation"], ["action_value"])
    module.register_buffer("support", torch.linspace(-2, 2, atoms))  # .cuda() moves it
    loss = DistributionalDQNLoss(module, gamma=0.9)
    return loss, HardUpdate(loss, value_network_update_interval=2), _dqn_batch


LOSSES = {
    "ClipPPOLoss": lambda: (ClipPPOLoss(_gaussian_actor(), _critic()), None, _batch),
    "PPOLoss": lambda: (PPOLoss(_gaussian_actor(), _critic()), None, _batch),
    "KLPENPPOLoss": lambda: (KLPENPPOLoss(_gaussian_actor(), _critic()), None, _batch),
    "A2CLoss": lambda: (A2CLoss(_gaussian_actor(), _critic()), None, _batch),
    "DQNLoss": _dqn,
    "SACLoss": _sac,
    # issue 37's losses, through the same builder
    "TD3Loss": lambda: _soft(TD3Loss(_deterministic_actor(), _qvalue(), bounds=(-1.0, 1.0))),
    "DDPGLoss": lambda: _soft(DDPGLoss(_deterministic_actor(), _qvalue())),
    "DiscreteSACLoss": _discrete_sac,
    "DistributionalDQNLoss": _c51,
    "CrossQLoss": lambda: (CrossQLoss(_gaussian_actor(), _qvalue(_BNQ())), None, _batch),
    "REDQLoss": lambda: _soft(REDQLoss(_gaussian_actor(), _qvalue(), num_qvalue_nets=3,
                                       sub_sample_len=2)),
    # issue 43's offline losses
    "IQLLoss": lambda: _soft(IQLLoss(_gaussian_actor(), _qvalue(), _critic(), expectile=0.7)),
    "CQLLoss": lambda: _soft(CQLLoss(_gaussian_actor(), _qvalue(), num_random=3,
                                     with_lagrange=True)),
    "TD3BCLoss": lambda: _soft(TD3BCLoss(_deterministic_actor(), _qvalue(), bounds=(-1.0, 1.0))),
}


def _twins(name: str, compile_arg):
    """The same loss, optimiser and updater twice (same initial weights)."""
    torch.manual_seed(0)
    loss, updater, make_batch = LOSSES[name]()
    twin = copy.deepcopy(loss)
    steps = []
    for mod, compile_ in ((loss, False), (twin, compile_arg)):
        opt = torch.optim.SGD(mod.parameters(), lr=torch.tensor(0.1), momentum=0.9)
        steps.append(make_update_step(mod, opt, target_updater=_updater_like(updater, mod),
                                      max_grad_norm=1.0, compile=compile_))
    return loss, twin, steps, make_batch


def _updater_like(updater, loss):
    """A target updater of ``updater``'s kind and setting, for ``loss`` (``None``: none)."""
    if updater is None:
        return None
    return type(updater)(loss, **(
        {"tau": updater.tau} if isinstance(updater, SoftUpdate)
        else {"value_network_update_interval": updater.value_network_update_interval}))


@pytest.mark.parametrize("timed", [False, True], ids=["untimed", "timed"])
def test_eager_step_is_the_hand_written_update(timed):
    from rl_profiling import Timing

    torch.manual_seed(0)
    loss = ClipPPOLoss(_gaussian_actor(), _critic())
    ref = copy.deepcopy(loss)
    opt = torch.optim.Adam(loss.parameters(), lr=1e-2)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    timing = Timing() if timed else None
    step = make_update_step(loss, opt, max_grad_norm=0.5, timing=timing)
    for seed in range(3):
        out = step(_batch(seed))
        ref_out = ref(_batch(seed))
        total = ref_out["loss_objective"] + ref_out["loss_critic"] + ref_out["loss_entropy"]
        ref_opt.zero_grad()
        total.backward()
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        ref_opt.step()
        torch.testing.assert_close(out["grad_norm"], norm)
    assert all(not v.requires_grad for v in out.values())
    assert {"ESS", "kl_approx", "clip_fraction"} <= set(out.keys())  # diagnostics kept
    for p, q in zip(loss.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert step.compile_seconds == 0.0 and step.recompiles == 0
    if timed:  # the run report's phases, as a hand-written loop times them
        assert [timing.count(k) for k in ("loss", "backward", "optimiser")] == [3, 3, 3]
        compiled = make_update_step(loss, opt, compile=True, timing=timing)
        assert compiled.timing is None  # one graph, no phases: ignored


def test_timing_must_be_a_timing():
    loss = ClipPPOLoss(_gaussian_actor(), _critic())
    with pytest.raises(TypeError, match="timing must be an rl_profiling.Timing.*got dict"):
        make_update_step(loss, torch.optim.Adam(loss.parameters()), timing={})


def test_target_updaters_soft_in_step_hard_after_it():
    torch.manual_seed(0)
    loss, updater, make_batch = _dqn()
    opt = torch.optim.Adam(loss.parameters(), lr=1e-2)
    step = make_update_step(loss, opt, target_updater=updater)
    target = next(loss.target_value_network.parameters())
    step(make_batch(0))
    assert not torch.equal(target, next(loss.value_network.parameters()))
    step(make_batch(1))  # the second call copies (interval 2)
    torch.testing.assert_close(target, next(loss.value_network.parameters()))
    sac, soft, _ = _sac()
    online, tgt = (ps[0] for ps in sac.target_pairs()[0])
    before = tgt.detach().clone()
    make_update_step(sac, torch.optim.Adam(sac.parameters()), target_updater=soft)(_batch(0))
    torch.testing.assert_close(tgt, before.lerp(online.detach(), 0.1))


# Dynamo probes `.grad` on a non-leaf while tracing DDPG's tensordict `select` (a
# UserWarning it turns into an error under warnings-as-errors; printed in a real run)
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_compiled_step_matches_eager_after_steps(name):
    torch._dynamo.reset()
    eager_loss, compiled_loss, (eager, compiled), make_batch = _twins(
        name, {"backend": "aot_eager"})
    for seed in range(3):  # call 1 warm-up (eager), 2 compiles, 3 runs the graph
        torch.manual_seed(seed)
        eager(make_batch(seed))
        torch.manual_seed(seed)
        out = compiled(make_batch(seed))
    assert compiled.compile_seconds > 0 and compiled.recompiles == 0
    assert all(not v.requires_grad for v in out.values())
    for p, q in zip(eager_loss.parameters(), compiled_loss.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    for p, q in zip(eager_loss.buffers(), compiled_loss.buffers(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)  # KLPEN's adapted beta too


def test_no_recompile_in_steady_state_and_one_per_new_shape(caplog):
    torch._dynamo.reset()
    loss = ClipPPOLoss(_gaussian_actor(), _critic())
    lr = torch.tensor(1e-2)
    opt = torch.optim.Adam(loss.parameters(), lr=lr)
    step = make_update_step(loss, opt, compile={"backend": "aot_eager", "warmup": 1})
    step(_batch(0))
    step(_batch(1))  # compiles
    graphs = counters["stats"]["unique_graphs"]
    for seed in range(2, 6):
        lr.fill_(1e-2 * (1 - seed / 10))  # an annealed tensor lr: no guard on it
        step(_batch(seed))
    assert counters["stats"]["unique_graphs"] == graphs and step.recompiles == 0
    with caplog.at_level(logging.WARNING, logger="rl_objectives._update_step"):
        step(_batch(6, n=2 * N))  # a new batch size: one recompilation, said
        step(_batch(7, n=2 * N))
    assert step.recompiles == 1
    said = [r.getMessage() for r in caplog.records if r.name == "rl_objectives._update_step"]
    assert len(said) == 1 and "recompiled" in said[0] and "batch_size [32]" in said[0]


def test_compiled_step_traces_the_loss_inside_its_own_frame():
    # the step's frame is traced through the loss up to backward's graph break (as a
    # hand-written step); Optimizer.zero_grad's break first thing had left a resume frame
    # Dynamo skipped, and the loss's forward was then compiled as a frame of its own
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    torch._dynamo.reset()
    counters.clear()
    loss = ClipPPOLoss(_gaussian_actor(), _critic())
    step = make_update_step(loss, torch.optim.Adam(loss.parameters()), max_grad_norm=0.5,
                            compile={"backend": "eager", "warmup": 1})
    for seed in range(3):
        step(_batch(seed))
    assert _debug_get_cache_entry_list(type(loss).forward.__code__) == []
    assert _debug_get_cache_entry_list(step._update.__code__) != []
    breaks = " ".join(counters["graph_break"])
    assert "zero_grad" not in breaks and "backward" in breaks, breaks


def test_bad_arguments_are_named():
    loss = ClipPPOLoss(_gaussian_actor(), _critic())
    opt = torch.optim.Adam(loss.parameters())
    with pytest.raises(TypeError, match="optimizer must be"):
        make_update_step(loss, loss.parameters())
    with pytest.raises(ValueError, match=r"compile: unknown keys \['mdoe'\]"):
        make_update_step(loss, opt, compile={"mdoe": "max-autotune"})
    with pytest.raises(TypeError, match="compile must be a bool or a dict"):
        make_update_step(loss, opt, compile="yes")
    with pytest.raises(ValueError, match="max_grad_norm must be"):
        make_update_step(loss, opt, max_grad_norm=0)
    with pytest.raises(ValueError, match=r"cudagraphs=True needs .* CUDA device.*\['cpu'\]"):
        make_update_step(loss, opt, cudagraphs=True)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("compile_", [False, {"warmup": 1}])
def test_cudagraph_step_matches_eager_on_cuda(compile_):
    torch.manual_seed(0)
    loss = ClipPPOLoss(_gaussian_actor(), _critic()).cuda()
    twin = copy.deepcopy(loss)
    steps = [make_update_step(m, torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True),
                              max_grad_norm=1.0, compile=c, cudagraphs=g)
             for m, c, g in ((loss, False, False), (twin, compile_, True))]
    for seed in range(8):  # warm-up, compile, CudaGraphModule's warm-up, capture, replays
        outs = [step(_batch(seed).cuda()) for step in steps]
    torch.testing.assert_close(outs[1]["loss_critic"], outs[0]["loss_critic"],
                               rtol=1e-3, atol=1e-4)
    for p, q in zip(loss.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)
    assert steps[1].compile_seconds > 0


# Losses whose step draws random numbers (sampled actions, target policy smoothing): a CUDA
# graph's replays draw from another offset of the generator than the eager calls do, so
# these are checked for running finite and moving the weights, not for equal values.
RANDOM_LOSSES = {"SACLoss", "TD3Loss", "CrossQLoss", "REDQLoss", "CQLLoss", "TD3BCLoss"}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_loss_steps_in_a_cuda_graph(name):
    torch.manual_seed(0)
    loss, updater, make_batch = LOSSES[name]()
    loss = loss.cuda()
    twin = copy.deepcopy(loss)
    steps = [make_update_step(
        m, torch.optim.Adam(m.parameters(), lr=torch.tensor(1e-2, device="cuda"),
                            capturable=True),
        target_updater=_updater_like(updater, m), max_grad_norm=1.0, cudagraphs=graphed)
        for m, graphed in ((loss, False), (twin, True))]
    before = [p.detach().clone() for p in twin.parameters()]
    for seed in range(8):  # eager warm-up, CudaGraphModule's warm-up, capture, replays
        outs = [step(make_batch(seed).cuda()) for step in steps]
    assert all(torch.isfinite(v.float()).all() for v in outs[1].values()), outs[1]
    if name in RANDOM_LOSSES:
        assert any(not torch.equal(p, q) for p, q in zip(before, twin.parameters(), strict=True))
        return
    for key, value in outs[0].items():
        torch.testing.assert_close(outs[1][key], value, rtol=1e-3, atol=1e-4)
    for p, q in zip(loss.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-3, atol=1e-4)
