"""SAC on Pendulum-v1, top to bottom (CleanRL style).

    uv run examples/sac_pendulum.py                    # 20k frames, mean return >= -250
    uv run examples/sac_pendulum.py --checkpoint-dir runs/sac --checkpoint-every 5000 --resume

The pieces: a ``GymEnv`` over a few Pendulum envs with ``RewardSum``; rl-modules'
``ProbabilisticActor`` with a ``TanhNormal`` scaled to the action spec, and a
``ValueOperator`` Q-network template of which ``SACLoss`` keeps two critics and their
targets; a ``Collector`` with random frames
first; a ``TensorDictReplayBuffer`` sampled uniformly; ``SoftUpdate`` of the target
critics after every gradient step. The last line printed is one JSON object with the
run's figures. With ``--checkpoint-dir``, a ``Checkpointer`` saves the run (loss module
with actor, critics, targets and temperature; optimiser; buffer; collector; RNGs) every
``--checkpoint-every`` frames, at the end and on SIGTERM/SIGUSR2 (then the script exits
cleanly); ``--resume`` continues from the latest one (see docs/checkpointing.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable

import torch
from rl_collectors import Checkpointer, Collector
from rl_envs import DoubleToFloat, GymEnv, RewardSum, TransformedEnv
from rl_modules import (
    MLP,
    Actor,
    AdditiveGaussianModule,
    BatchRenorm1d,
    NormalParamExtractor,
    ProbabilisticActor,
    TanhModule,
    TanhNormal,
    ValueOperator,
)
from rl_objectives import CrossQLoss, SACLoss, SoftUpdate, TD3Loss, make_update_step
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_replay import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from rl_trainers import record_video
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn


@dataclasses.dataclass
class Config:
    """SAC hyper-parameters (defaults tuned to reach a mean return >= -250 within 20k frames).

    Attributes:
        env_id: gymnasium environment id (a continuous action space in [-high, high]).
        num_envs: sub-envs in the vector env.
        steps_per_env: steps of each sub-env per batch.
        total_frames: frames to collect in all.
        learning_starts: frames collected with a uniform random policy before learning.
        buffer_size: replay capacity in frames.
        batch_size: transitions per gradient step.
        updates_per_frame: gradient steps per collected frame.
        lr: Adam learning rate of actor, critics and temperature.
        gamma: discount.
        tau: Polyak weight of the target critics.
        hidden: width of the two hidden layers of actor and critics.
        seed: seed of torch and of the envs.
        threads: torch intra-op threads (1 is fastest for networks this small).
        device: device of the networks, the loss and the buffer.
        logdir: where the logger writes (its last part names the run; scalars named like
            CleanRL's); none when empty.
        logger: ``csv``, ``tensorboard``, ``wandb`` (offline unless WANDB_MODE=online) or
            ``mlflow`` (``rl_record.experiment_logger``).
        video: record one deterministic evaluation episode at the end, to the logger
            (``runs/...`` when ``logdir`` is empty).
        profile: Chrome trace path: iterations 3-5 under torch.profiler, ranges included
            with ``RL_PROFILING=1`` (read it with ``rl-profile summary``); none when empty.
        checkpoint_dir: where checkpoints go; none when empty (SIGTERM still stops cleanly).
        checkpoint_every: frames between checkpoints (0: only at the end and on SIGTERM).
        resume: continue from the latest checkpoint in ``checkpoint_dir``, if any.
        compile: run each gradient step (loss, backward, Adam, target lerp) as one
            ``torch.compile``d ``make_update_step`` (needs ``policy_delay`` 1).
        cudagraphs: capture that step in a CUDA graph (``device="cuda"`` only).
        allow_fresh_start: with ``resume``, start from frame 0 when ``checkpoint_dir`` has
            checkpoints but none is intact (else the run stops with an error).
        no_check_finite: turn off the collector's NaN/inf guard (``check_finite``).
        algo: ``sac``; ``td3`` (a deterministic tanh actor with Gaussian exploration noise,
            ``TD3Loss``: twin critics, target policy smoothing); or ``crossq``
            (``CrossQLoss``: critics with ``BatchRenorm1d``, no target critics).
        policy_delay: gradient steps per actor (and temperature, and target) update
            (TD3's 2, CrossQ's 3; 1: every step).
        exploration_noise: TD3's action noise std, as a fraction of the action bound.
        critic_hidden: width of the critics' two hidden layers (0: ``hidden``).
    """

    env_id: str = "Pendulum-v1"
    num_envs: int = 4
    steps_per_env: int = 1
    total_frames: int = 20_000
    learning_starts: int = 1_000
    buffer_size: int = 100_000
    batch_size: int = 256
    updates_per_frame: float = 1.0
    lr: float = 1e-3
    gamma: float = 0.99
    tau: float = 0.005
    hidden: int = 128
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    logdir: str = ""
    logger: str = "tensorboard"
    video: bool = False
    profile: str = ""
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    resume: bool = False
    compile: bool = False
    cudagraphs: bool = False
    allow_fresh_start: bool = False
    no_check_finite: bool = False
    algo: str = "sac"
    policy_delay: int = 1
    exploration_noise: float = 0.1
    critic_hidden: int = 0


def parse_args(config: type[Config] = Config, doc: str = __doc__) -> Config:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for field in dataclasses.fields(config):
        kind = type(field.default)
        if kind is bool:  # `--resume` or `--resume false`
            kind, more = (
                (lambda v: v.lower() in ("1", "true", "yes")),
                {"nargs": "?", "const": True},
            )
        else:
            more = {}
        parser.add_argument(
            "--" + field.name.replace("_", "-"), type=kind, default=field.default, **more
        )
    return config(**vars(parser.parse_args()))


def make_env(cfg: Config, **gym_kwargs) -> TransformedEnv:
    # DoubleToFloat: MuJoCo's float64 observations to float32 (a no-op on Pendulum's)
    env = TransformedEnv(GymEnv(cfg.env_id, num_envs=cfg.num_envs, **gym_kwargs), DoubleToFloat())
    env.append_transform(RewardSum())
    env.set_seed(cfg.seed)
    return env


def make_agent(env: TransformedEnv, cfg: Config):
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    if cfg.algo == "td3":  # mu(s) squashed into the action bounds
        actor = TensorDictSequential(
            Actor(MLP(n_obs, n_act, num_cells=cfg.hidden, depth=2, activation_class=nn.ReLU),
                  out_keys=["param"]),
            TanhModule(["param"], ["action"], spec=env.action_spec),
        )
    else:
        net = nn.Sequential(
            MLP(n_obs, 2 * n_act, num_cells=cfg.hidden, depth=2, activation_class=nn.ReLU),
            NormalParamExtractor(),
        )
        # TanhNormal takes the action's low/high from the env's Bounded action spec
        actor = ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]),
            ["loc", "scale"],
            spec=env.action_spec,
            distribution_class=TanhNormal,
        )
    # Q(s, a): the MLP concatenates its two inputs; CrossQ's critics batch-renormalise
    norm = {"norm_class": BatchRenorm1d, "norm_kwargs": {"momentum": 0.01,
            "warmup_steps": 100_000}} if cfg.algo == "crossq" else {}
    qvalue = ValueOperator(
        MLP(n_obs + n_act, 1, num_cells=cfg.critic_hidden or cfg.hidden, depth=2,
            activation_class=nn.ReLU, **norm),
        in_keys=["observation", "action"],
    )
    return actor.to(cfg.device), qvalue.to(cfg.device)


def make_loss(actor, qvalue, env: TransformedEnv, cfg: Config):
    """The loss of ``cfg.algo`` and its target updater (``None``: CrossQ has no targets).

    SAC's and CrossQ's entropy target (``"auto"``) is read from ``env.full_action_spec``: a
    composite spec whose own shape is the env batch, so the target is minus the action's
    dimension (-1 on Pendulum, -6 on HalfCheetah) whatever the number of envs.
    """
    if cfg.algo not in ("sac", "td3", "crossq"):
        raise ValueError(f"--algo: expected sac, td3 or crossq, got {cfg.algo!r}")
    if cfg.algo == "crossq":
        return CrossQLoss(actor, qvalue, loss_function="l2", gamma=cfg.gamma,
                          action_spec=env.full_action_spec), None
    if cfg.algo == "td3":
        bound = float(env.action_spec.high.max())  # TD3's noise is relative to the bound
        loss_fn = TD3Loss(actor, qvalue, action_spec=env.action_spec, loss_function="l2",
                          policy_noise=0.2 * bound, noise_clip=0.5 * bound, gamma=cfg.gamma)
    else:
        loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2",
                          gamma=cfg.gamma, action_spec=env.full_action_spec)
    return loss_fn, SoftUpdate(loss_fn, tau=cfg.tau)


def exploring_policy(actor, env: TransformedEnv, cfg: Config):
    """What the collector runs: TD3's actor plus Gaussian noise; SAC's samples itself."""
    if cfg.algo != "td3":
        return actor
    sigma = cfg.exploration_noise * float(env.action_spec.high.max())
    noise = AdditiveGaussianModule(env.action_spec, sigma_init=sigma, sigma_end=sigma,
                                   annealing_num_steps=1)
    return TensorDictSequential(actor, noise.to(cfg.device))


def make_logger(cfg: Config):
    # rl_record: --logger csv|tensorboard|wandb|mlflow under --logdir (CleanRL's names)
    return experiment_logger(cfg.logger, cfg.logdir, cfg, video=cfg.video, model_name="sac")


def make_optimizer(loss_fn, cfg: Config) -> torch.optim.Optimizer:
    """One Adam over every trained parameter of the loss (actor, critics, temperature)."""
    return torch.optim.Adam([p for p in loss_fn.parameters() if p.requires_grad], lr=cfg.lr)


@dataclasses.dataclass(frozen=True)
class Parts:
    """The pieces an algorithm's example may replace in ``main``'s loop (``crossq_mujoco.py``
    builds its own critics and optimiser and runs this loop).

    Attributes:
        agent: ``(env, cfg) -> (actor, qvalue)``.
        loss: ``(actor, qvalue, env, cfg) -> (loss module, target updater or None)``.
        policy: ``(actor, env, cfg) -> the module the collector runs``.
        optimizer: ``(loss module, cfg) -> the optimiser``.
    """

    agent: Callable = make_agent
    loss: Callable = make_loss
    policy: Callable = exploring_policy
    optimizer: Callable = make_optimizer


def main(cfg: Config, parts: Parts | None = None) -> dict:
    parts = parts or Parts()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)  # no per-call checks
    env = make_env(cfg)
    actor, qvalue = parts.agent(env, cfg)
    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    # Wiring: the collector samples actions from the actor (uniformly at random for the
    # first `learning_starts` frames); the buffer keeps every transition; the loss trains
    # the actor, the two critics it holds and the temperature; SoftUpdate moves the target
    # critics; the collector's actor is the trained one (same module, same device).
    collector = Collector(
        env,
        parts.policy(actor, env, cfg),
        frames_per_batch=frames_per_batch,
        total_frames=cfg.total_frames,
        check_finite=not cfg.no_check_finite,
        init_random_frames=cfg.learning_starts,
        policy_device=cfg.device,
    )
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.buffer_size, device=cfg.device),
                                    sampler=RandomSampler(), batch_size=cfg.batch_size)
    loss_fn, target_updater = parts.loss(actor, qvalue, env, cfg)
    optim = parts.optimizer(loss_fn, cfg)
    logger, returns = make_logger(cfg), deque(maxlen=20)
    timing = RunReport(
        f"{cfg.algo.upper()} {cfg.env_id}", profile=cfg.profile or None
    )  # every phase timed; a trace
    update = make_step(loss_fn, optim, target_updater, cfg, timing)  # None: policy delay
    from tqdm import tqdm

    ckpt = Checkpointer(cfg.checkpoint_dir, every_frames=cfg.checkpoint_every, loss=loss_fn,
                        optim=optim, buffer=buffer, collector=collector)
    saved = ckpt.restore(allow_fresh=cfg.allow_fresh_start) if cfg.resume else None
    frames, updates, owed = (
        (saved["frames"], saved["updates"], saved["owed"]) if saved else (0, 0, 0.0)
    )
    returns.extend(saved["returns"] if saved else [])
    bar = tqdm(total=cfg.total_frames, initial=frames, unit="frame", mininterval=1.0)
    resumed_from, start, losses = frames, time.perf_counter(), None
    steady = None  # (frames, time) after the first batch that trained (and compiled)
    batches = iter(collector)
    while True:
        with timing.add_time("collect"):
            batch = next(batches, None)
        if batch is None:
            break
        frames += batch.numel()
        done = batch["next", "done"].squeeze(-1)
        returns.extend(batch["next", "episode_reward"][done].flatten().tolist())
        with timing.add_time("replay"):
            buffer.extend(batch.reshape(-1).to(cfg.device))
        if frames >= cfg.learning_starts:
            owed += batch.numel() * cfg.updates_per_frame
            while owed >= 1.0:
                if update is not None:
                    with timing.add_time("replay"):
                        sample = buffer.sample()
                    losses = run_update(update, sample, timing)
                else:
                    step = train_step(buffer, loss_fn, optim, target_updater, timing,
                                      actor_step=updates % cfg.policy_delay == 0)
                    losses = {**(losses or {}), **step}  # logged: each term's latest
                owed, updates = owed - 1.0, updates + 1
        timing.step(batch.numel())
        if steady is None and (update is None or update.timing is not None
                               or update.compile_seconds > 0):
            steady = (frames, time.perf_counter()) if losses is not None else None
        mean_return = sum(returns) / max(len(returns), 1)
        extra = {"updates": updates, "owed": owed, "returns": list(returns)}
        if ckpt.step(frames, extra, final=frames >= cfg.total_frames):
            break  # SIGTERM: the checkpoint is written, stop cleanly
        fps = (frames - resumed_from) / (time.perf_counter() - start)
        bar.update(batch.numel())
        bar.set_postfix(fps=f"{fps:,.0f}", ret=f"{mean_return:.1f}", refresh=False)
        if logger is not None and (done.any() or (frames // frames_per_batch) % 25 == 0):
            log_scalars(logger, frames, mean_return if returns else None, fps, losses)
    bar.close()
    collector.shutdown()
    ckpt.close()
    seconds = time.perf_counter() - start
    timing.stop()
    print(timing.report())
    fps_steady = steady_fps(steady, frames)
    compile_seconds = update.compile_seconds if update is not None else 0.0
    print(f"update step: {compile_seconds:.1f} s compiling; steady state after the "
          f"first batch that trained: {fps_steady} frames/s")
    if timing.trace:
        print(f"Chrome trace: {timing.trace} (read it with `rl-profile summary {timing.trace}`)")
    if cfg.video:  # one deterministic episode, rendered, to the logger (rl_trainers)
        with make_env(dataclasses.replace(cfg, num_envs=1), render_mode="rgb_array") as venv:
            record_video(actor, venv, logger, step=frames)
    if logger is not None:
        logger.close()
    return {
        "frames": frames,
        "seconds": round(seconds, 2),
        "mean_return": round(sum(returns) / max(len(returns), 1), 2),
        "fps": round((frames - resumed_from) / seconds, 1),
        "episodes_in_mean": len(returns),
        "updates": updates,
        "seed": cfg.seed,
        "resumed_from_frames": resumed_from,
        "stopped_by_signal": ckpt.stop_requested is not None,
        "compile_seconds": round(compile_seconds, 2),
        "steady_fps": fps_steady,
    }


def steady_fps(steady: tuple[int, float] | None, frames: int) -> float | None:
    """Frames/s after the first batch (the one that compiles), or ``None`` with one batch."""
    if steady is None or frames == steady[0]:
        return None
    return round((frames - steady[0]) / (time.perf_counter() - steady[1]), 1)


def make_step(loss_fn, optim, target_updater, cfg: Config, timing: RunReport):
    """The gradient step as one ``make_update_step`` (eager, it times its phases in
    ``timing``), or ``None`` with a policy delay (eager only: ``train_step`` below)."""
    if cfg.policy_delay != 1:
        if cfg.compile or cfg.cudagraphs:
            raise ValueError(f"--compile/--cudagraphs: expected --policy-delay 1 (one "
                             f"function updates every loss), got {cfg.policy_delay}")
        return None
    return make_update_step(loss_fn, optim, target_updater=target_updater,
                            compile=cfg.compile, cudagraphs=cfg.cudagraphs, timing=timing)


def run_update(update, sample, timing: RunReport):
    """Eager, the update step times its own phases (loss, backward, optimiser); with
    --compile / --cudagraphs it is one graph, timed as one phase (update)."""
    if update.timing is not None:
        return update(sample)
    with timing.add_time("update"):
        return update(sample)


# each loss's critics-only term, by TorchRL's name for it (a subclass before its base)
CRITIC_LOSS = {CrossQLoss: "qvalue_loss", TD3Loss: "value_loss", SACLoss: "qvalue_v2_loss"}


def train_step(buffer, loss_fn, optim, target_updater: SoftUpdate | None, timing: RunReport,
               actor_step: bool = True) -> dict:
    """One gradient step of the critics and, on ``actor_step``, of the actor and temperature
    (TD3 and CrossQ delay them), then a Polyak update of the targets (if any).

    A critics-only step computes the critics' loss alone (``CRITIC_LOSS``), as SB3's
    ``TD3`` and sb3-contrib's ``CrossQ`` do: the actor's terms it would not apply are
    not computed either. Returns the terms computed (``loss_qvalue`` alone on such a step).
    """
    with timing.add_time("replay"):
        sample = buffer.sample()
    with timing.add_time("loss"):
        if actor_step:
            losses = dict(loss_fn(sample).items())
            loss = sum(v for k, v in losses.items()
                       if k in ("loss_qvalue", "loss_actor", "loss_alpha"))
        else:
            critics_only = next(name for cls, name in CRITIC_LOSS.items()
                                if isinstance(loss_fn, cls))
            loss, _ = getattr(loss_fn, critics_only)(sample)
            losses = {"loss_qvalue": loss}
    with timing.add_time("backward"):
        optim.zero_grad(set_to_none=True)
        loss.backward()
    with timing.add_time("optimiser"):
        optim.step()
        if target_updater is not None and actor_step:
            target_updater.step()
    return losses


def log_scalars(logger, frames: int, mean_return: float | None, fps: float, losses) -> None:
    if mean_return is not None:  # None until an episode finished
        logger.add_scalar("charts/episodic_return", mean_return, frames)
    logger.add_scalar("charts/SPS", fps, frames)
    if losses is not None:
        present = set(losses.keys())
        for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
            if key not in present:
                continue  # TD3 has no temperature
            name = key.removeprefix("loss_") + "_loss" if key.startswith("loss_") else key
            logger.add_scalar(f"losses/{name}", float(losses[key].detach()), frames)


if __name__ == "__main__":
    print(json.dumps(main(parse_args())))
