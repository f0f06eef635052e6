"""The update steps the update benchmarks time: ours (``make_update_step``) and plain torch.

Each row builds, on one device, the same networks twice: once as this toolkit's modules
and loss run through :func:`rl_objectives.make_update_step`, once as a CleanRL / LeanRL
shaped plain-torch update (``nn.Sequential`` networks, the loss written out, one
function). Rows (sizes as the reference scripts):

- ``ppo_cartpole``: 64x64 tanh actor and critic, Categorical(2), 4-dim observation.
- ``ppo_atari``: NatureCNN trunk on ``[4, 84, 84]`` uint8 frames, shared by actor
  (Categorical(4)) and critic (LeanRL's ``ppo_atari_envpool``).
- ``ppo_continuous``: 64x64 tanh actor and critic, HalfCheetah's 17 -> 6.
- ``sac``: 256x256 ReLU actor (TanhNormal) and twin critics, 17 -> 6, one Adam over
  critics, actor and temperature, target critics moved by a foreach lerp.
  The actor's loss runs the critics on detached parameters (LeanRL's
  ``qnet_params.data``), as ``SACLoss`` does: with one Adam over everything, running
  them on their live parameters would also train the critics on the actor's loss, and
  cost the critics' weight gradients of that pass.
- ``td3``: 256x256 actor (tanh) and twin critics, target actor and critics, target
  policy smoothing, the actor's loss on the first critic's detached parameters; needs
  ``rl_objectives.TD3Loss`` (skipped where absent).

The offline rows (``OFFLINE_ROWS``, ``examples/iql_offline.py``'s losses at its sizes:
256x256 ReLU networks, HalfCheetah's 17 -> 6, batch 256, one Adam over every network,
target critics moved by a foreach lerp):

- ``iql``: ``IQLLoss`` (TanhNormal actor, twin critics, a value network V; expectile 0.7,
  inverse temperature 3); plain: the same three losses written out (the critics'
  target-minimum and ``V(s')`` without gradients, the actor weighted by the clipped
  ``exp(beta A)``).
- ``td3bc``: ``TD3BCLoss`` (alpha 2.5); plain: the TD3 update with the actor's loss
  ``-lambda Q(s, pi(s)) + (pi(s) - a)^2``, ``lambda = alpha / mean|Q|``.
- ``cql``: ``CQLLoss`` (SAC's terms plus the conservative penalty over 10 uniform and
  2 x 10 policy actions per state, the terms ``iql_offline.py`` trains); no plain row
  (``plain`` is ``None``).

Batches are synthetic tensors of the real shapes and dtypes (no environment runs here):
the benchmarks time the learner, which is what compiling and CUDA graphs change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

ROWS = ("ppo_cartpole", "ppo_atari", "ppo_continuous", "sac", "td3")
OFFLINE_ROWS = ("iql", "td3bc", "cql")
SIZES = {  # (observation shape, action dim or number of actions, batch)
    "ppo_cartpole": ((4,), 2, 256),
    "ppo_atari": ((4, 84, 84), 4, 256),
    "ppo_continuous": ((17,), 6, 64),
    "sac": ((17,), 6, 256),
    "td3": ((17,), 6, 256),
    "iql": ((17,), 6, 256),
    "td3bc": ((17,), 6, 256),
    "cql": ((17,), 6, 256),
}


@dataclasses.dataclass
class Row:
    """One row: two update callables over the same batch, and how to make a batch.

    Attributes:
        name: the row's name (a key of ``SIZES``).
        ours: ``TensorDict -> TensorDict`` (the toolkit's update step).
        plain: ``TensorDict -> tuple`` (the plain-torch update of the same math);
            ``None`` where the row has none.
        batch: a fresh batch on the row's device.
    """

    name: str
    ours: Callable
    plain: Callable | None
    batch: Callable[[], TensorDict]


def _mlp(n_in: int, n_out: int, hidden: int, act: type[nn.Module]) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), act(), nn.Linear(hidden, hidden), act(),
                         nn.Linear(hidden, n_out))


def _nature_cnn(n_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 512),
        nn.ReLU(), nn.Linear(512, n_out))


class _Scaled(nn.Module):
    """uint8 frames to float in [0, 1], then the trunk (as CleanRL's ``x / 255.0``)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.float() / 255.0)


def _ppo_batch(obs_shape, n_act, n, device, discrete) -> TensorDict:
    if len(obs_shape) == 3:
        obs = torch.randint(0, 256, (n, *obs_shape), dtype=torch.uint8, device=device)
    else:
        obs = torch.randn(n, *obs_shape, device=device)
    action = (torch.randint(0, n_act, (n,), device=device) if discrete
              else torch.randn(n, n_act, device=device).clamp(-3, 3))
    return TensorDict({"observation": obs, "action": action,
                       "sample_log_prob": -torch.rand(n, device=device) - 0.5,
                       "advantage": torch.randn(n, 1, device=device),
                       "value_target": torch.randn(n, 1, device=device)}, [n])


def _ppo_nets(name, obs_shape, n_act):
    discrete = name != "ppo_continuous"
    out = n_act if discrete else 2 * n_act
    if name == "ppo_atari":
        return _Scaled(_nature_cnn(out)), _Scaled(_nature_cnn(1)), discrete
    return _mlp(obs_shape[0], out, 64, nn.Tanh), _mlp(obs_shape[0], 1, 64, nn.Tanh), discrete


def _plain_ppo(actor, critic, discrete, opt, clip=0.2, max_grad_norm=0.5):
    params = [p for g in opt.param_groups for p in g["params"]]

    def update(td):
        opt.zero_grad(set_to_none=True)
        obs, action = td["observation"], td["action"]
        adv, ret = td["advantage"].squeeze(-1), td["value_target"].squeeze(-1)
        if discrete:
            dist = torch.distributions.Categorical(logits=actor(obs))
            logp, ent = dist.log_prob(action), dist.entropy()
        else:
            loc, scale = actor(obs).chunk(2, -1)
            dist = torch.distributions.Normal(loc, nn.functional.softplus(scale) + 1e-4)
            logp, ent = dist.log_prob(action).sum(-1), dist.entropy().sum(-1)
        ratio = (logp - td["sample_log_prob"]).exp()
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
        vloss = (critic(obs).squeeze(-1) - ret).pow(2).mean()
        loss = pg + 0.5 * vloss - 0.0 * ent.mean()
        loss.backward()
        gn = nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        return pg.detach(), vloss.detach(), gn.detach()

    return update


def _ours_ppo(actor_net, critic_net, discrete, n_act):
    from rl_modules import NormalParamExtractor, ProbabilisticActor, ValueOperator
    from rl_objectives import ClipPPOLoss

    if discrete:
        actor = ProbabilisticActor(TensorDictModule(actor_net, ["observation"], ["logits"]),
                                   ["logits"], distribution_class=torch.distributions.Categorical,
                                   return_log_prob=True)
    else:
        actor = ProbabilisticActor(
            TensorDictModule(nn.Sequential(actor_net, NormalParamExtractor()),
                             ["observation"], ["loc", "scale"]), ["loc", "scale"],
            distribution_class=_IndependentNormal, return_log_prob=True)
    return ClipPPOLoss(actor, ValueOperator(critic_net), clip_epsilon=0.2, entropy_coef=0.0,
                       critic_coef=0.5, loss_critic_type="l2")


def _IndependentNormal(loc, scale):  # noqa: N802 (a distribution class stand-in)
    return torch.distributions.Independent(torch.distributions.Normal(loc, scale), 1)


def _adam(params, device, lr=3e-4):
    cuda = torch.device(device).type == "cuda"
    return torch.optim.Adam(params, lr=torch.tensor(lr, device=device) if cuda else lr,
                            capturable=cuda)


def ppo_row(name: str, device: str, mode: str, compile_kwargs: dict) -> Row:
    """A PPO row (``ppo_cartpole``, ``ppo_atari``, ``ppo_continuous``) in ``mode``.

    Args:
        name: the row.
        device: where networks and batches live.
        mode: ``"eager"``, ``"compile"`` or ``"cudagraphs"`` (compile + CUDA graphs).
        compile_kwargs: ``torch.compile`` arguments (``backend`` for dry runs).

    Returns:
        The :class:`Row`.
    """
    from rl_objectives import make_update_step

    obs_shape, n_act, n = SIZES[name]
    torch.manual_seed(0)
    actor, critic, discrete = _ppo_nets(name, obs_shape, n_act)
    plain_actor, plain_critic = (m.to(device) for m in _clone(actor, critic))
    plain_opt = _adam([*plain_actor.parameters(), *plain_critic.parameters()], device)
    plain = _wrap(_plain_ppo(plain_actor, plain_critic, discrete, plain_opt), mode,
                  compile_kwargs)
    loss = _ours_ppo(actor, critic, discrete, n_act).to(device)
    ours = make_update_step(loss, _adam(list(loss.parameters()), device), max_grad_norm=0.5,
                            compile=_compile_arg(mode, compile_kwargs),
                            cudagraphs=mode == "cudagraphs")
    return Row(name, ours, plain, lambda: _ppo_batch(obs_shape, n_act, n, device, discrete))


def _clone(*modules: nn.Module) -> list[nn.Module]:
    import copy

    return [copy.deepcopy(m) for m in modules]


def _compile_arg(mode: str, compile_kwargs: dict) -> bool | dict:
    return dict(compile_kwargs) if mode in ("compile", "cudagraphs") else False


def _wrap(fn: Callable, mode: str, compile_kwargs: dict) -> Callable:
    """Plain torch compiled / captured as LeanRL does: ``torch.compile``, then
    ``CudaGraphModule``; one eager warm-up call first (the optimiser's state)."""
    if mode == "eager":
        return fn
    compiled = torch.compile(fn, **compile_kwargs)
    calls = [0]

    def warm(td):
        calls[0] += 1
        return fn(td) if calls[0] == 1 else compiled(td)

    if mode == "cudagraphs":
        from tensordict.nn import CudaGraphModule

        return CudaGraphModule(warm, warmup=4)
    return warm


def _sac_batch(n, device, obs=17, act=6) -> TensorDict:
    done = torch.zeros(n, 1, dtype=torch.bool, device=device)
    return TensorDict({"observation": torch.randn(n, obs, device=device),
                       "action": torch.rand(n, act, device=device) * 2 - 1,
                       "next": {"observation": torch.randn(n, obs, device=device),
                                "reward": torch.randn(n, 1, device=device),
                                "done": done, "terminated": done.clone()}}, [n])


class _Q(nn.Module):
    def __init__(self, obs: int, act: int, hidden: int = 256) -> None:
        super().__init__()
        self.net = _mlp(obs + act, 1, hidden, nn.ReLU)

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1))


def _frozen(net: nn.Module) -> Callable:
    """``net`` run on its parameters detached (LeanRL's ``qnet_params.data``): the actor's
    loss moves the actor only, so the critics' weight gradients are not computed there."""

    def call(x):
        params = {k: v.detach() for k, v in net.named_parameters()}
        return torch.func.functional_call(net, params, (x,))

    return call


def _plain_sac(actor, q1, q2, log_alpha, opt, targets, onlines, gamma=0.99, tau=0.005):
    q1_t, q2_t = (_clone(q)[0] for q in (q1, q2))
    for p in (*q1_t.parameters(), *q2_t.parameters()):
        p.requires_grad_(False)
    targets.extend([*q1_t.parameters(), *q2_t.parameters()])
    onlines.extend([*q1.parameters(), *q2.parameters()])
    target_entropy = -6.0
    q1_frozen, q2_frozen = _frozen(q1), _frozen(q2)

    def act(obs):
        loc, log_std = actor(obs).chunk(2, -1)
        std = log_std.clamp(-5, 2).exp()
        u = loc + std * torch.randn_like(loc)
        a = u.tanh()
        logp = (torch.distributions.Normal(loc, std).log_prob(u)
                - torch.log1p(-a.pow(2) + 1e-6)).sum(-1, keepdim=True)
        return a, logp

    def update(td):
        opt.zero_grad(set_to_none=True)
        obs, nxt = td["observation"], td["next", "observation"]
        alpha = log_alpha.exp()
        with torch.no_grad():
            a2, logp2 = act(nxt)
            cat2 = torch.cat([nxt, a2], -1)
            q_next = torch.min(q1_t(cat2), q2_t(cat2)) - alpha * logp2
            y = td["next", "reward"] + gamma * (~td["next", "terminated"]) * q_next
        cat = torch.cat([obs, td["action"]], -1)
        q_loss = (q1(cat) - y).pow(2).mean() + (q2(cat) - y).pow(2).mean()
        a, logp = act(obs)
        cat_pi = torch.cat([obs, a], -1)
        actor_loss = (alpha.detach() * logp - torch.min(q1_frozen(cat_pi),
                                                         q2_frozen(cat_pi))).mean()
        alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
        (q_loss + actor_loss + alpha_loss).backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(targets, [p.detach() for p in onlines], tau)
        return q_loss.detach(), actor_loss.detach()

    return update


def _tanh_normal_actor(actor_net: nn.Module):
    from rl_modules import NormalParamExtractor, ProbabilisticActor, TanhNormal

    return ProbabilisticActor(
        TensorDictModule(nn.Sequential(actor_net, NormalParamExtractor()), ["observation"],
                         ["loc", "scale"]), ["loc", "scale"], distribution_class=TanhNormal,
        return_log_prob=False)


def sac_row(device: str, mode: str, compile_kwargs: dict) -> Row:
    """The SAC row at HalfCheetah's sizes (see :func:`ppo_row` for the arguments)."""
    from rl_modules import ValueOperator
    from rl_objectives import SACLoss, SoftUpdate, make_update_step

    torch.manual_seed(0)
    obs, act, n = 17, 6, SIZES["sac"][2]
    actor_net = _mlp(obs, 2 * act, 256, nn.ReLU)
    q1, q2 = _mlp(obs + act, 1, 256, nn.ReLU), _mlp(obs + act, 1, 256, nn.ReLU)
    pa, pq1, pq2 = (m.to(device) for m in _clone(actor_net, q1, q2))
    log_alpha = torch.zeros((), device=device, requires_grad=True)
    plain_opt = _adam([*pa.parameters(), *pq1.parameters(), *pq2.parameters(), log_alpha],
                      device)
    plain = _wrap(_plain_sac(pa, pq1, pq2, log_alpha, plain_opt, [], []), mode, compile_kwargs)
    qvalue = ValueOperator(_Q(obs, act), in_keys=["observation", "action"])
    loss = SACLoss(_tanh_normal_actor(actor_net), qvalue, num_qvalue_nets=2,
                   loss_function="l2").to(device)
    opt = _adam([p for p in loss.parameters() if p.requires_grad], device)
    ours = make_update_step(loss, opt, target_updater=SoftUpdate(loss, tau=0.005),
                            compile=_compile_arg(mode, compile_kwargs),
                            cudagraphs=mode == "cudagraphs")
    return Row("sac", ours, plain, lambda: _sac_batch(n, device))


def _plain_td3(actor, q1, q2, opt, gamma=0.99, tau=0.005, noise=0.2, noise_clip=0.5,
               bc_alpha=None):
    a_t, q1_t, q2_t = _clone(actor, q1, q2)
    targets = [p for m in (a_t, q1_t, q2_t) for p in m.parameters()]
    onlines = [p for m in (actor, q1, q2) for p in m.parameters()]
    for p in targets:
        p.requires_grad_(False)
    q1_frozen = _frozen(q1)

    def update(td):
        opt.zero_grad(set_to_none=True)
        obs, nxt = td["observation"], td["next", "observation"]
        with torch.no_grad():
            a2 = a_t(nxt).tanh()
            a2 = (a2 + (torch.randn_like(a2) * noise).clamp(-noise_clip, noise_clip)).clamp(-1, 1)
            cat2 = torch.cat([nxt, a2], -1)
            y = td["next", "reward"] + gamma * (~td["next", "terminated"]) * torch.min(
                q1_t(cat2), q2_t(cat2))
        cat = torch.cat([obs, td["action"]], -1)
        q_loss = (q1(cat) - y).pow(2).mean() + (q2(cat) - y).pow(2).mean()
        pi = actor(obs).tanh()
        q_pi = q1_frozen(torch.cat([obs, pi], -1))
        if bc_alpha is None:
            actor_loss = -q_pi.mean()
        else:  # TD3+BC: lambda = alpha / mean |Q|, plus the squared distance to the data
            lmbda = bc_alpha / q_pi.abs().mean().detach()
            actor_loss = -lmbda * q_pi.mean() + (pi - td["action"]).pow(2).mean()
        (q_loss + actor_loss).backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(targets, [p.detach() for p in onlines], tau)
        return q_loss.detach(), actor_loss.detach()

    return update


def td3_row(device: str, mode: str, compile_kwargs: dict) -> Row | None:
    """The TD3 row (actor and critics updated every step); ``None`` without ``TD3Loss``."""
    import rl_objectives
    from rl_modules import ValueOperator

    if not hasattr(rl_objectives, "TD3Loss"):
        return None
    torch.manual_seed(0)
    obs, act, n = 17, 6, SIZES["td3"][2]
    actor_net = nn.Sequential(_mlp(obs, act, 256, nn.ReLU), nn.Tanh())
    q1, q2 = _mlp(obs + act, 1, 256, nn.ReLU), _mlp(obs + act, 1, 256, nn.ReLU)
    pa, pq1, pq2 = (m.to(device) for m in _clone(actor_net[0], q1, q2))
    plain_opt = _adam([*pa.parameters(), *pq1.parameters(), *pq2.parameters()], device)
    plain = _wrap(_plain_td3(pa, pq1, pq2, plain_opt), mode, compile_kwargs)
    loss = rl_objectives.TD3Loss(
        TensorDictModule(actor_net, ["observation"], ["action"]),
        ValueOperator(_Q(obs, act), in_keys=["observation", "action"]),
        bounds=(-1.0, 1.0)).to(device)
    opt = _adam([p for p in loss.parameters() if p.requires_grad], device)
    ours = rl_objectives.make_update_step(
        loss, opt, target_updater=rl_objectives.SoftUpdate(loss, tau=0.005),
        compile=_compile_arg(mode, compile_kwargs), cudagraphs=mode == "cudagraphs")
    return Row("td3", ours, plain, lambda: _sac_batch(n, device))


def _plain_iql(actor, q1, q2, vnet, opt, gamma=0.99, tau=0.005, expectile=0.7, beta=3.0):
    q1_t, q2_t = _clone(q1, q2)
    targets = [*q1_t.parameters(), *q2_t.parameters()]
    onlines = [*q1.parameters(), *q2.parameters()]
    for p in targets:
        p.requires_grad_(False)

    def log_prob(obs, action):  # TanhNormal's: the Gaussian's at atanh(a), less log(1 - a^2)
        loc, scale = actor(obs).chunk(2, -1)
        scale = nn.functional.softplus(scale) + 1e-4
        u = torch.atanh(action.clamp(-1 + 1e-6, 1 - 1e-6))
        return (torch.distributions.Normal(loc, scale).log_prob(u)
                - torch.log1p(-action.pow(2) + 1e-6)).sum(-1, keepdim=True)

    def update(td):
        opt.zero_grad(set_to_none=True)
        obs, action, nxt = td["observation"], td["action"], td["next", "observation"]
        cat = torch.cat([obs, action], -1)
        with torch.no_grad():
            q_target = torch.min(q1_t(cat), q2_t(cat))
            y = td["next", "reward"] + gamma * (~td["next", "terminated"]) * vnet(nxt)
        value = vnet(obs)
        diff = q_target - value
        value_loss = (torch.where(diff > 0, expectile, 1 - expectile) * diff.pow(2)).mean()
        weight = torch.exp(beta * diff.detach()).clamp(max=100.0)
        actor_loss = -(weight * log_prob(obs, action)).mean()
        q_loss = (q1(cat) - y).pow(2).mean() + (q2(cat) - y).pow(2).mean()
        (value_loss + actor_loss + q_loss).backward()
        opt.step()
        with torch.no_grad():
            torch._foreach_lerp_(targets, [p.detach() for p in onlines], tau)
        return q_loss.detach(), actor_loss.detach(), value_loss.detach()

    return update


def offline_row(name: str, device: str, mode: str, compile_kwargs: dict) -> Row:
    """An offline row (``iql``, ``td3bc``, ``cql``; see the module docstring)."""
    from rl_modules import ValueOperator
    from rl_objectives import CQLLoss, IQLLoss, SoftUpdate, TD3BCLoss, make_update_step

    torch.manual_seed(0)
    obs, act, n = SIZES[name][0][0], SIZES[name][1], SIZES[name][2]
    q1, q2 = _mlp(obs + act, 1, 256, nn.ReLU), _mlp(obs + act, 1, 256, nn.ReLU)
    qvalue = ValueOperator(_Q(obs, act), in_keys=["observation", "action"])
    pq1, pq2 = (m.to(device) for m in _clone(q1, q2))
    plain, loss_keys = None, None
    if name == "iql":
        actor_net, vnet = _mlp(obs, 2 * act, 256, nn.ReLU), _mlp(obs, 1, 256, nn.ReLU)
        pa, pv = (m.to(device) for m in _clone(actor_net, vnet))
        plain_opt = _adam([*pa.parameters(), *pq1.parameters(), *pq2.parameters(),
                           *pv.parameters()], device)
        plain = _plain_iql(pa, pq1, pq2, pv, plain_opt)
        loss = IQLLoss(_tanh_normal_actor(actor_net), qvalue,
                       ValueOperator(vnet, in_keys=["observation"]), loss_function="l2",
                       expectile=0.7, temperature=3.0)
    elif name == "td3bc":
        actor_net = nn.Sequential(_mlp(obs, act, 256, nn.ReLU), nn.Tanh())
        pa = _clone(actor_net[0])[0].to(device)
        plain_opt = _adam([*pa.parameters(), *pq1.parameters(), *pq2.parameters()], device)
        plain = _plain_td3(pa, pq1, pq2, plain_opt, bc_alpha=2.5)
        loss = TD3BCLoss(TensorDictModule(actor_net, ["observation"], ["action"]), qvalue,
                         bounds=(-1.0, 1.0), loss_function="l2", alpha=2.5)
    elif name == "cql":
        loss = CQLLoss(_tanh_normal_actor(_mlp(obs, 2 * act, 256, nn.ReLU)), qvalue,
                       loss_function="l2", min_q_weight=5.0)
        loss_keys = ("loss_actor", "loss_qvalue", "loss_cql", "loss_alpha", "loss_alpha_prime")
    else:
        raise ValueError(f"name: expected one of {OFFLINE_ROWS}, got {name!r}")
    loss = loss.to(device)
    opt = _adam([p for p in loss.parameters() if p.requires_grad], device)
    ours = make_update_step(loss, opt, target_updater=SoftUpdate(loss, tau=0.005),
                            compile=_compile_arg(mode, compile_kwargs),
                            cudagraphs=mode == "cudagraphs", loss_keys=loss_keys)
    plain = None if plain is None else _wrap(plain, mode, compile_kwargs)
    return Row(name, ours, plain, lambda: _sac_batch(n, device, obs, act))


def make_row(name: str, device: str, mode: str, compile_kwargs: dict) -> Row | None:
    """Any row by name (see the module docstring); ``None`` where its loss is absent."""
    if name in OFFLINE_ROWS:
        return offline_row(name, device, mode, compile_kwargs)
    if name == "sac":
        return sac_row(device, mode, compile_kwargs)
    if name == "td3":
        return td3_row(device, mode, compile_kwargs)
    return ppo_row(name, device, mode, compile_kwargs)


def frames_per_update(name: str) -> float:
    """Frames one update stands for: PPO's minibatch is its frames over the epochs (CleanRL's
    4 epochs for Atari and CartPole's 10 here, 10 for MuJoCo); SAC and TD3 take one
    gradient step per frame (LeanRL's scripts with one env); an offline row's frame is one
    gradient step (``iql_offline.py``'s meaning)."""
    if name.startswith("ppo"):
        epochs = 4 if name == "ppo_atari" else 10
        return SIZES[name][2] / epochs
    return 1.0
