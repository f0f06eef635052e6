"""Offline RL from a Minari dataset: IQL (or CQL, TD3+BC, behaviour cloning), top to bottom.

    uv run benchmarks/make_offline_dataset.py              # records rl/halfcheetah/medium-v0
    uv run examples/iql_offline.py                         # IQL, 100k gradient steps
    uv run examples/iql_offline.py --loss cql              # or td3bc, bc
    uv run examples/iql_offline.py --env-id Pendulum-v1 --dataset-id demo/pendulum-v0 \\
        --record-frames 20000                              # records a random-policy set first

The pieces: ``MinariExperienceReplay`` over the dataset (memory-mapped after its first
load; ``--record-frames`` records a random-policy dataset with a ``Collector`` and
``write_minari_dataset`` when the dataset is missing); ``sac_pendulum.py``'s actor and
critic builders (a ``TanhNormal`` ``ProbabilisticActor`` for IQL and CQL, a tanh
deterministic actor for TD3+BC and BC); ``IQLLoss`` (with a ``ValueOperator`` for V),
``CQLLoss`` or ``TD3BCLoss``, and ``SoftUpdate`` of the target critics. Every
``--eval-every`` gradient steps the actor plays ``--eval-episodes`` deterministic episodes
in the real env (``rl_trainers.evaluate``). IQL trains on rewards scaled as its paper does for
the locomotion sets (``--reward-scale auto``: times 1000 over the spread of the dataset's
episode returns) and decays its actor's learning rate to 0 on a cosine (its paper's code);
the other losses train on the dataset's rewards. Each gradient step is one
``rl_objectives.make_update_step`` (eager: it times loss, backward and optimiser apart;
``--compile`` / ``--cudagraphs``: one compiled graph); ``--video`` records one
deterministic episode at the end to the logger. One "frame" here is one gradient step, so
``--total-frames`` is the number of gradient steps (the examples' shared flag). The last
line printed is one JSON object with the run's figures.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import types
from pathlib import Path

import torch
from rl_collectors import Collector
from rl_modules import MLP, ValueOperator
from rl_objectives import CQLLoss, IQLLoss, SoftUpdate, TD3BCLoss, make_update_step
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_replay import DatasetError, MinariExperienceReplay, write_minari_dataset
from rl_trainers import evaluate, record_video
from sac_pendulum import make_agent, make_env, parse_args, run_update, steady_fps
from tensordict import TensorDict
from torch import nn

LOSSES = ("iql", "cql", "td3bc", "bc")


@dataclasses.dataclass
class Config:
    """Offline hyper-parameters (IQL's paper settings for the MuJoCo locomotion sets).

    Attributes:
        env_id: the gymnasium env the dataset was recorded on (evaluation runs there).
        dataset_id: the Minari dataset id.
        minari_root: Minari's dataset folder (empty: ``$MINARI_DATASETS_PATH`` or
            ``~/.minari/datasets``).
        copies_root: where the memory-mapped copies go (empty: ``~/.cache/rl_replay``).
        record_frames: when the dataset is missing, record this many frames of a uniform
            random policy first (0: a missing dataset is an error).
        loss: ``iql``, ``cql``, ``td3bc`` or ``bc``.
        total_frames: gradient steps.
        batch_size: transitions per gradient step.
        lr: Adam learning rate of every network (of the critics and value network when
            ``actor_lr`` is set).
        actor_lr: Adam learning rate of the actor (0: ``lr``); CQL's warm start
            (``bc_steps``) trains it at ``lr``, the steps after it at ``actor_lr``.
        actor_lr_decay: ``cosine`` decays the actor's learning rate to 0 over the run
            (``lr_t = lr (1 + cos(pi t / total_frames)) / 2``), ``none`` keeps it; ``auto``
            is ``cosine`` for ``--loss iql`` (its paper's schedule) and ``none`` for the
            other losses.
        gamma: discount.
        tau: Polyak weight of the target critics.
        hidden: width of the two hidden layers of every network.
        expectile: IQL's ``tau``.
        temperature: IQL's inverse temperature ``beta``.
        cql_weight: CQL's ``min_q_weight``.
        bc_steps: CQL's behaviour-cloning warm start: for its first ``bc_steps`` gradient
            steps the actor trains on ``loss_actor_bc`` (``alpha log pi(a~|s) -
            log pi(a|s)``) in place of ``loss_actor``, the critics on their usual terms (as
            the CQL paper's code, RLlib's and TorchRL's CQL scripts do; 0, the default: none,
            as CORL's; on the medium set a 3k-5k-step warm start did not keep CQL from
            collapsing once its own actor loss took over, see the offline page).
        td3bc_alpha: TD3+BC's ``alpha``.
        reward_scale: what the sampled rewards are multiplied by: ``auto`` is IQL's
            locomotion scaling for ``--loss iql`` (``1000 / (max - min)`` of the dataset's
            complete episodes' returns, the IQL paper's setting) and ``1`` for the
            other losses (their papers train on the raw rewards); a positive number
            applies to every loss.
        eval_every: gradient steps between evaluations (and one at the end).
        eval_episodes: deterministic episodes per evaluation.
        num_envs: sub-envs of the evaluation (and recording) env.
        seed: seed of torch and of the envs.
        threads: torch intra-op threads.
        device: device of the networks and the loss.
        logdir: where the logger writes; none when empty.
        logger: ``csv``, ``tensorboard``, ``wandb`` or ``mlflow``.
        profile: Chrome trace path of iterations 3-5; none when empty.
        compile: compile the update step (``make_update_step(compile=True)``).
        cudagraphs: capture the update step in a CUDA graph (CUDA only).
        video: record one deterministic evaluation episode at the end, to the logger.
    """

    env_id: str = "HalfCheetah-v5"
    dataset_id: str = "rl/halfcheetah/medium-v0"
    minari_root: str = ""
    copies_root: str = ""
    record_frames: int = 0
    loss: str = "iql"
    total_frames: int = 100_000
    batch_size: int = 256
    lr: float = 3e-4
    actor_lr: float = 0.0
    actor_lr_decay: str = "auto"
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 256
    expectile: float = 0.7
    temperature: float = 3.0
    cql_weight: float = 5.0
    bc_steps: int = 0
    td3bc_alpha: float = 2.5
    reward_scale: str = "auto"
    eval_every: int = 5_000
    eval_episodes: int = 10
    num_envs: int = 1
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    logdir: str = ""
    logger: str = "tensorboard"
    profile: str = ""
    compile: bool = False
    cudagraphs: bool = False
    video: bool = False


def load_dataset(cfg: Config) -> MinariExperienceReplay:
    """The dataset as a replay buffer; recorded first with a random policy if it is missing
    and ``record_frames`` says so (Minari's folder: ``--minari-root``, else its own)."""
    if cfg.minari_root:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(cfg.minari_root).resolve())

    def load() -> MinariExperienceReplay:
        return MinariExperienceReplay(cfg.dataset_id, cfg.batch_size,
                                      root=cfg.copies_root or None, load_from_local_minari=True)

    try:
        return load()
    except DatasetError:
        if not cfg.record_frames:
            raise
    env = make_env(cfg)  # write_minari_dataset refuses to write over an existing dataset
    steps = max(1, min(cfg.record_frames // cfg.num_envs, 1000))
    collector = Collector(env, None, frames_per_batch=steps * cfg.num_envs,
                          total_frames=cfg.record_frames)
    write_minari_dataset(cfg.dataset_id, collector, env_id=cfg.env_id,
                         metadata={"algorithm_name": "uniform random policy"})
    collector.shutdown()
    return load()


def episode_returns(buffer: MinariExperienceReplay) -> torch.Tensor:
    """The return of each complete episode of the dataset (its transitions up to a done;
    episodes are stored one after the other), float64."""
    n = len(buffer)  # the stored leaves themselves, not a copy of every key
    reward = buffer.storage.leaf(("next", "reward"))[:n].reshape(-1).double()
    ends = buffer.storage.leaf(("next", "done"))[:n].reshape(-1).nonzero().reshape(-1)
    total = torch.cat([reward.new_zeros(1), reward.cumsum(0)])
    starts = torch.cat([ends.new_zeros(1), ends[:-1] + 1])
    return total[ends + 1] - total[starts]


def reward_scale(cfg: Config, buffer: MinariExperienceReplay) -> float:
    """The factor of ``--reward-scale`` (see :class:`Config`) for this loss and dataset."""
    if cfg.reward_scale != "auto":
        try:
            scale = float(cfg.reward_scale)
        except ValueError:
            scale = math.nan
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"--reward-scale: expected 'auto' or a positive number, got "
                             f"{cfg.reward_scale!r}")
        return scale
    if cfg.loss != "iql":
        return 1.0
    returns = episode_returns(buffer)
    spread = float(returns.max() - returns.min()) if len(returns) > 1 else 0.0
    if spread <= 0:
        raise ValueError(
            f"--reward-scale auto: IQL's scale needs complete episodes of different returns; "
            f"{cfg.dataset_id!r} has {len(returns)} (returns {returns.tolist()[:4]}): pass a "
            "number instead")
    return 1000.0 / spread


def make_loss(cfg: Config, env):
    """The loss of ``cfg.loss``, its actor, and the target updater (``None`` for BC)."""
    if cfg.loss not in LOSSES:
        raise ValueError(f"--loss: expected one of {LOSSES}, got {cfg.loss!r}")
    algo = "td3" if cfg.loss in ("td3bc", "bc") else "sac"
    actor, qvalue = make_agent(env, types.SimpleNamespace(
        algo=algo, hidden=cfg.hidden, critic_hidden=0, device=cfg.device))
    if cfg.loss == "bc":
        return BCLoss(actor), actor, None
    if cfg.loss == "iql":
        n_obs = env.observation_spec["observation"].shape[-1]
        value = ValueOperator(MLP(n_obs, 1, num_cells=cfg.hidden, depth=2,
                                  activation_class=nn.ReLU), in_keys=["observation"])
        loss = IQLLoss(actor, qvalue, value.to(cfg.device), loss_function="l2", gamma=cfg.gamma,
                       expectile=cfg.expectile, temperature=cfg.temperature)
    elif cfg.loss == "cql":
        loss = CQLLoss(actor, qvalue, loss_function="l2", gamma=cfg.gamma,
                       min_q_weight=cfg.cql_weight, action_spec=env.action_spec)
    else:
        loss = TD3BCLoss(actor, qvalue, action_spec=env.action_spec, loss_function="l2",
                         alpha=cfg.td3bc_alpha, gamma=cfg.gamma)
    return loss, actor, SoftUpdate(loss, tau=cfg.tau)


CQL_TERMS = ("loss_actor", "loss_qvalue", "loss_cql", "loss_alpha", "loss_alpha_prime")
"""CQL's terms trained after the warm start: every ``loss_*`` but ``loss_actor_bc``."""
CQL_WARM_TERMS = ("loss_actor_bc", *CQL_TERMS[1:])
"""CQL's terms of its first ``--bc-steps`` steps: behaviour cloning in place of ``loss_actor``."""
DECAYS = ("auto", "cosine", "none")


def make_optimizer(cfg: Config, loss_fn: nn.Module, actor: nn.Module) -> torch.optim.Adam:
    """Adam over the loss's trained parameters: group 0 the critics (and IQL's value
    network) at ``--lr``, group 1 the actor at ``--actor-lr`` (``--lr`` when 0). With
    ``--compile`` / ``--cudagraphs`` the learning rates are tensors, so decaying the
    actor's changes it in place and recompiles nothing (on CUDA the Adam is then
    ``capturable``, which a tensor learning rate needs there)."""
    if cfg.actor_lr_decay not in DECAYS:
        raise ValueError(f"--actor-lr-decay: expected one of {DECAYS}, "
                         f"got {cfg.actor_lr_decay!r}")
    if not cfg.actor_lr >= 0:
        raise ValueError(f"--actor-lr: expected a number >= 0 (0: --lr), got {cfg.actor_lr!r}")
    actor_ptrs = {p.data_ptr() for p in actor.parameters()}
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    graph = cfg.compile or cfg.cudagraphs
    cuda = torch.device(cfg.device).type == "cuda"

    def rate(value: float):
        return torch.tensor(value, device=cfg.device) if graph else value

    groups = [{"params": [p for p in params if p.data_ptr() not in actor_ptrs],
               "lr": rate(cfg.lr)},
              {"params": [p for p in params if p.data_ptr() in actor_ptrs],
               "lr": rate(actor_lr_at(cfg, 0))}]
    return torch.optim.Adam([g for g in groups if g["params"]], lr=rate(cfg.lr),
                            capturable=graph and cuda)


def actor_lr_at(cfg: Config, step: int) -> float:
    """The actor's learning rate after ``step`` gradient steps: ``--lr`` during CQL's warm
    start, then ``--actor-lr`` (``--lr`` when 0), decayed by ``--actor-lr-decay``."""
    if cfg.loss == "cql" and step < cfg.bc_steps:
        return cfg.lr
    lr, decay = cfg.actor_lr or cfg.lr, cfg.actor_lr_decay
    if decay == "none" or (decay == "auto" and cfg.loss != "iql"):
        return lr
    return lr * 0.5 * (1.0 + math.cos(math.pi * step / cfg.total_frames))


def set_lr(group: dict, lr: float) -> None:
    """A tensor learning rate (compiled steps) changes in place, so nothing recompiles."""
    if torch.is_tensor(group["lr"]):
        group["lr"].fill_(lr)
    else:
        group["lr"] = lr


class BCLoss(nn.Module):
    """Behaviour cloning: ``loss_actor = E[mean_j (mu(s)_j - a_j)^2]`` (the deterministic
    actor; TD3+BC with ``alpha = 0`` minus its critics)."""

    def __init__(self, actor: nn.Module) -> None:
        super().__init__()
        self.actor_network = actor

    def forward(self, batch):
        action = self.actor_network(batch.select("observation"))["action"]
        return TensorDict({"loss_actor": (action - batch["action"]).pow(2).mean()}, [])


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)
    buffer = load_dataset(cfg)
    scale = reward_scale(cfg, buffer)
    env = make_env(cfg)
    n_act = env.action_spec.shape[-1]
    low = env.action_spec.space.low.reshape(-1, n_act)[0].to(cfg.device)
    high = env.action_spec.space.high.reshape(-1, n_act)[0].to(cfg.device)
    margin = 1e-4 * (high - low)  # TanhNormal's log-prob is infinite at the bounds
    loss_fn, actor, target_updater = make_loss(cfg, env)
    optim = make_optimizer(cfg, loss_fn, actor)
    logger = experiment_logger(cfg.logger, cfg.logdir, cfg, video=cfg.video,
                               model_name=cfg.loss)
    timing = RunReport(f"{cfg.loss.upper()} offline {cfg.dataset_id}",
                       profile=cfg.profile or None)

    def update_step(loss_keys):
        return make_update_step(loss_fn, optim, target_updater=target_updater,
                                compile=cfg.compile, cudagraphs=cfg.cudagraphs, timing=timing,
                                loss_keys=loss_keys)

    update = update_step(CQL_TERMS if cfg.loss == "cql" else None)
    warm = update_step(CQL_WARM_TERMS) if cfg.loss == "cql" and cfg.bc_steps > 0 else None
    evals, losses, steady, start = [], None, None, time.perf_counter()
    for step in range(1, cfg.total_frames + 1):
        with timing.add_time("replay"):
            batch = buffer.sample().to(cfg.device)
            if scale != 1.0:
                batch["next", "reward"] = batch["next", "reward"] * scale
            batch["action"] = torch.maximum(torch.minimum(batch["action"], high - margin),
                                            low + margin)
        losses = run_update(warm if warm is not None and step <= cfg.bc_steps else update,
                            batch, timing)
        set_lr(optim.param_groups[-1], actor_lr_at(cfg, step))
        timing.step(1)
        if steady is None and (update.timing is not None or update.compile_seconds > 0):
            steady = (step, time.perf_counter())  # after the step that compiled (if any)
        if step % cfg.eval_every == 0 or step == cfg.total_frames:
            with timing.add_time("eval"):
                result = evaluate(actor, env, cfg.eval_episodes, seed=cfg.seed + step)
            evals.append((step, result.mean_return))
            log(logger, step, result.mean_return, step / (time.perf_counter() - start), losses)
    seconds = time.perf_counter() - start
    timing.stop()
    print(timing.report())
    env.close()
    fps_steady = steady_fps(steady, cfg.total_frames)
    compile_seconds = update.compile_seconds + (warm.compile_seconds if warm else 0.0)
    print(f"update step: {compile_seconds:.1f} s compiling; steady state: "
          f"{fps_steady} gradient steps/s")
    if cfg.video:  # one deterministic episode, rendered, to the logger (rl_trainers)
        with make_env(dataclasses.replace(cfg, num_envs=1), render_mode="rgb_array") as venv:
            record_video(actor, venv, logger, step=cfg.total_frames)
    if logger is not None:
        logger.close()
    return {
        "frames": cfg.total_frames, "seconds": round(seconds, 2),
        "mean_return": round(evals[-1][1], 2), "fps": round(cfg.total_frames / seconds, 1),
        "loss": cfg.loss, "dataset_id": cfg.dataset_id, "dataset_transitions": len(buffer),
        "behaviour_return": buffer.metadata.get("behaviour_return"),
        "reward_scale": scale,
        "evaluations": [[s, round(r, 2)] for s, r in evals], "seed": cfg.seed,
        "compile_seconds": round(compile_seconds, 2), "steady_fps": fps_steady,
    }


def log(logger, step: int, mean_return: float, sps: float, losses) -> None:
    if logger is None:
        return
    logger.add_scalar("charts/episodic_return", mean_return, step)
    logger.add_scalar("charts/SPS", sps, step)
    for key, value in losses.items():
        if key.startswith("loss_"):
            logger.add_scalar(f"losses/{key.removeprefix('loss_')}_loss", float(value), step)


if __name__ == "__main__":
    print(json.dumps(main(parse_args(Config, __doc__))))
