"""PPO on a MuJoCo robot (Hopper-v5 by default), top to bottom (CleanRL style).

    uv run examples/ppo_mujoco.py                         # Hopper-v5, 1M frames
    uv run examples/ppo_mujoco.py --env-id HalfCheetah-v5 # any Box-action env

The pieces: a ``GymEnv`` over MuJoCo with ``VecNorm`` on the observations (running mean
and variance, frozen copies for evaluation), an observation clip to [-10, 10], the reward
divided by the running std of the discounted return (``NormalizeReward``) and clipped to
[-10, 10] (CleanRL's wrappers; ``RewardSum`` reads the reward before them, so the returns
reported are the env's own), and the action clipped to the env's bounds on the way in (the
policy's Gaussian is unbounded, its log-prob is that of the unclipped sample, as in
CleanRL); rl-modules' ``ProbabilisticActor`` (an ``IndependentNormal`` with a
state-independent log std) and ``ValueOperator`` over ``MLP`` s; a ``Collector``; ``GAE``;
``ClipPPOLoss`` with CleanRL's continuous-action defaults (2048 steps per batch, 10 epochs
of 32 minibatches, lr 3e-4 annealed to 0, gamma 0.99, lambda 0.95, clip 0.2).
The last line printed is one JSON object with the run's figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from collections import deque

import torch
from rl_collectors import Checkpointer, Collector
from rl_envs import (
    ClipTransform,
    DoubleToFloat,
    GymEnv,
    InitTracker,
    NormalizeReward,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
)
from rl_modules import MLP, IndependentNormal, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss, make_update_step
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from rl_trainers import record_video
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
from torch import nn


@dataclasses.dataclass
class Config:
    """PPO hyper-parameters (CleanRL's ``ppo_continuous_action.py`` defaults).

    Attributes:
        env_id: gymnasium environment id with a ``Box`` action space.
        num_envs: sub-envs in the vector env.
        steps_per_env: rollout length T per batch (frames_per_batch = num_envs * T).
        total_frames: frames to collect in all.
        lr: Adam learning rate, annealed linearly to 0.
        gamma: discount.
        lmbda: GAE lambda.
        epochs: passes over each batch.
        num_minibatches: minibatches per epoch.
        clip_epsilon: PPO ratio clip.
        entropy_coef: entropy bonus weight.
        critic_coef: value loss weight.
        max_grad_norm: gradient clipping norm.
        hidden: width of the two hidden layers of actor and critic.
        seed: seed of torch and of the envs.
        threads: torch intra-op threads (1 is fastest for networks this small).
        device: device of the networks and the loss.
        logdir: where the logger writes (its last part names the run; scalars named like
            CleanRL's); none when empty.
        logger: ``csv``, ``tensorboard``, ``wandb`` (offline unless WANDB_MODE=online) or
            ``mlflow`` (``rl_record.experiment_logger``).
        profile: Chrome trace path: iterations 3-5 under torch.profiler, ranges included
            with ``RL_PROFILING=1`` (read it with ``rl-profile summary``); none when empty.
        checkpoint_dir: where checkpoints go; none when empty (SIGTERM still stops cleanly).
        checkpoint_every: frames between checkpoints (0: only at the end and on SIGTERM).
        resume: continue from the latest checkpoint in ``checkpoint_dir``, if any.
        compile: run the update step (loss, backward, clip, Adam) through ``torch.compile``
            (the first minibatch eager, the next compiles; the JSON's ``compile_seconds``):
            ``true``, ``false`` or ``auto``, which compiles when the run makes at least
            ``AUTO_COMPILE_UPDATES`` update steps, the run that pays compiling back.
        cudagraphs: capture the update step in a CUDA graph (``device="cuda"`` only).
        allow_fresh_start: with ``resume``, start from frame 0 when ``checkpoint_dir`` has
            checkpoints but none is intact (else the run stops with an error).
        no_check_finite: turn off the collector's NaN/inf guard (``check_finite``).
        video: record one deterministic evaluation episode at the end, to the logger
            (MuJoCo renders offscreen through ``MUJOCO_GL``, ``egl`` unless set: headless
            Mesa/EGL; ``osmesa`` needs libOSMesa).
        video_max_steps: the recorded episode's step limit (a truncation); 0: the env's.
    """

    env_id: str = "Hopper-v5"
    num_envs: int = 1
    steps_per_env: int = 2048
    total_frames: int = 1_000_000
    lr: float = 3e-4
    gamma: float = 0.99
    lmbda: float = 0.95
    epochs: int = 10
    num_minibatches: int = 32
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.0
    critic_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    seed: int = 0
    threads: int = 1
    device: str = "cpu"
    logdir: str = ""
    logger: str = "tensorboard"
    profile: str = ""
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    resume: bool = False
    compile: str = "auto"
    cudagraphs: bool = False
    allow_fresh_start: bool = False
    no_check_finite: bool = False
    video: bool = False
    video_max_steps: int = 0


# Compiling the update step takes 11-17 s on a 2-core CPU and makes each of Hopper's
# minibatch steps ~2.5x faster (benchmarks/bench_update.py's ppo_continuous row); a whole
# run pays it back after ~16k frames, about 2,400 update steps (bench_compile_runs.py):
# `--compile auto` compiles from 10,000 steps, well past that point, so a short try-out
# stays eager and the default 1M-frame run (156,000 steps) compiles.
AUTO_COMPILE_UPDATES = 10_000
_COMPILE_CHOICES = {"auto": "auto", "true": True, "1": True, "yes": True, "false": False,
                    "0": False, "no": False}


def compile_choice(value: str) -> str:
    """``--compile``'s value: ``true``, ``false`` or ``auto`` (case-insensitive)."""
    if str(value).lower() not in _COMPILE_CHOICES:
        raise argparse.ArgumentTypeError(
            f"--compile expects true, false or auto, received {value!r}")
    return str(value).lower()


def use_compile(cfg: Config, update_steps: int) -> bool:
    """Whether the update step compiles: ``cfg.compile``, ``auto`` resolved by the run's
    number of update steps (``AUTO_COMPILE_UPDATES``)."""
    choice = _COMPILE_CHOICES[compile_choice(cfg.compile)]
    return update_steps >= AUTO_COMPILE_UPDATES if choice == "auto" else choice


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Config):
        kind, more = type(field.default), {}
        if field.name == "compile":  # `--compile`, `--compile false`, `--compile auto`
            kind, more = compile_choice, {"nargs": "?", "const": "true"}
        elif kind is bool:  # `--resume` or `--resume false`
            kind, more = (
                (lambda v: v.lower() in ("1", "true", "yes")),
                {"nargs": "?", "const": True},
            )
        parser.add_argument(
            "--" + field.name.replace("_", "-"), type=kind, default=field.default, **more
        )
    return Config(**vars(parser.parse_args()))


def make_env(cfg: Config, **gym_kwargs) -> TransformedEnv:
    env = TransformedEnv(GymEnv(cfg.env_id, num_envs=cfg.num_envs, **gym_kwargs), DoubleToFloat())
    env.append_transform(RewardSum())  # the true return, before the reward is scaled
    # cumulative statistics (decay 1), as CleanRL's NormalizeObservation: late in training
    # they barely move, so the policy's inputs keep their meaning
    env.append_transform(VecNorm(in_keys=["observation"], decay=1.0, eps=1e-2))
    env.append_transform(ClipTransform(low=-10.0, high=10.0))
    env.append_transform(NormalizeReward(gamma=cfg.gamma))  # / running std of the return
    env.append_transform(ClipTransform(["reward"], low=-10.0, high=10.0))
    env.append_transform(ClipTransform(in_keys=[], in_keys_inv=["action"]))  # to the env's bounds
    env.append_transform(StepCounter())
    env.append_transform(InitTracker())
    env.set_seed(cfg.seed)
    return env


def mlp(n_in: int, n_out: int, hidden: int, out_std: float) -> MLP:
    """Two tanh hidden layers, orthogonal init (gain sqrt 2; ``out_std`` on the output)."""
    net = MLP(n_in, n_out, num_cells=hidden, depth=2, activation_class=nn.Tanh)
    for layer in net:
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight, 2**0.5)
            nn.init.zeros_(layer.bias)
    nn.init.orthogonal_(net[-1].weight, out_std)
    return net


def make_agent(env: TransformedEnv, cfg: Config):
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    # loc from the MLP, a learned log std shared by all states (starts at std 1)
    net = nn.Sequential(mlp(n_obs, n_act, cfg.hidden, 0.01), AddStateIndependentNormalScale(n_act))
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        distribution_class=IndependentNormal,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(n_obs, 1, cfg.hidden, 1.0))
    return actor.to(cfg.device), critic.to(cfg.device)


def make_logger(cfg: Config):
    # rl_record: --logger csv|tensorboard|wandb|mlflow under --logdir (CleanRL's names)
    return experiment_logger(cfg.logger, cfg.logdir, cfg, video=cfg.video, model_name="ppo")


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)  # no per-call checks
    env = make_env(cfg)
    actor, critic = make_agent(env, cfg)
    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    minibatch = frames_per_batch // cfg.num_minibatches
    # Wiring: the collector runs the actor on the env (sampling actions and log-probs);
    # GAE runs the critic on the batch; the buffer serves the minibatch epochs; the loss
    # reads what the collector and GAE wrote.
    collector = Collector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=cfg.total_frames,
        check_finite=not cfg.no_check_finite,
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=True)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(frames_per_batch, device=cfg.device),
                                    sampler=SamplerWithoutReplacement(), batch_size=minibatch)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        critic_coef=cfg.critic_coef,
        loss_critic_type="l2",
    )
    params = list(loss_fn.parameters())
    num_batches = -(-cfg.total_frames // frames_per_batch)
    compiled = use_compile(cfg, num_batches * cfg.epochs * cfg.num_minibatches)
    lr = torch.tensor(cfg.lr) if compiled else cfg.lr  # a tensor: the schedule won't recompile
    optim = torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda i: 1 - i / num_batches)
    logger, returns = make_logger(cfg), deque(maxlen=20)
    timing = RunReport(
        f"PPO {cfg.env_id}", profile=cfg.profile or None
    )  # every phase timed; a trace
    # loss, backward, clip and Adam as one update step: eager, it times its phases in the
    # run report (loss, backward, optimiser); with --compile / --cudagraphs it is one graph,
    # timed as one phase (update)
    update = make_update_step(loss_fn, optim, max_grad_norm=cfg.max_grad_norm,
                              compile=compiled, cudagraphs=cfg.cudagraphs, timing=timing)
    from tqdm import tqdm

    # the collector's state holds its counters and the env transforms' statistics; the loss
    # module holds actor and critic
    ckpt = Checkpointer(cfg.checkpoint_dir, every_frames=cfg.checkpoint_every,
                        loss=loss_fn, optim=optim, sched=sched, collector=collector)
    saved = ckpt.restore(allow_fresh=cfg.allow_fresh_start) if cfg.resume else None
    first, frames = (saved["batch"] + 1, saved["frames"]) if saved else (0, 0)
    returns.extend(saved["returns"] if saved else [])
    bar = tqdm(total=cfg.total_frames, initial=frames, unit="frame", mininterval=1.0)
    resumed_from, start, losses = frames, time.perf_counter(), None
    steady = None  # (frames, time) after the first batch, which compiles
    batches = iter(collector)
    for i in range(first, num_batches):
        with timing.add_time("collect"):
            batch = next(batches)
        frames += batch.numel()
        done = batch["next", "done"].squeeze(-1)
        returns.extend(batch["next", "episode_reward"][done].flatten().tolist())
        with timing.add_time("advantage"), torch.no_grad():
            advantage(batch)
        with timing.add_time("replay"):
            buffer.empty()
            buffer.extend(batch.reshape(-1).to(cfg.device))
        for _ in range(cfg.epochs):
            for _ in range(len(buffer) // minibatch):
                with timing.add_time("replay"):
                    sample = buffer.sample(minibatch)
                if update.timing is not None:  # eager: the step times its own phases
                    losses = update(sample)
                    continue
                with timing.add_time("update"):  # --compile / --cudagraphs: one graph
                    losses = update(sample)
        sched.step()
        with timing.add_time("weight_push"):
            collector.update_policy_weights_()
        timing.step(batch.numel())
        steady = steady or (frames, time.perf_counter())
        mean_return = sum(returns) / max(len(returns), 1)
        if ckpt.step(frames, {"batch": i, "returns": list(returns)}, final=i == num_batches - 1):
            break  # SIGTERM: the checkpoint is written, stop cleanly
        fps = (frames - resumed_from) / (time.perf_counter() - start)
        bar.update(batch.numel())
        bar.set_postfix(fps=f"{fps:,.0f}", ret=f"{mean_return:.1f}", refresh=False)
        if logger is not None:
            log_scalars(logger, frames, mean_return if returns else None, fps, losses)
    bar.close()
    collector.shutdown()
    ckpt.close()
    seconds = time.perf_counter() - start
    timing.stop()
    print(timing.report())
    fps_steady = steady_fps(steady, frames)
    compile_seconds = update.compile_seconds
    print(f"update step: {compile_seconds:.1f} s compiling; steady state after the "
          f"first batch: {fps_steady} frames/s")
    if timing.trace:
        print(f"Chrome trace: {timing.trace} (read it with `rl-profile summary {timing.trace}`)")
    video_length = record_eval_video(cfg, env, actor, logger, frames) if cfg.video else None
    if logger is not None:
        logger.close()
    return {
        "frames": frames,
        "seconds": round(seconds, 2),
        "mean_return": round(sum(returns) / max(len(returns), 1), 2),
        "fps": round((frames - resumed_from) / seconds, 1),
        "episodes_in_mean": len(returns),
        "seed": cfg.seed,
        "resumed_from_frames": resumed_from,
        "stopped_by_signal": ckpt.stop_requested is not None,
        "compiled": compiled,
        "compile_seconds": round(compile_seconds, 2),
        "steady_fps": fps_steady,
        "env_id": cfg.env_id,
        "video_length": video_length,
    }


def record_eval_video(cfg: Config, env: TransformedEnv, actor, logger, frames: int) -> int:
    """One deterministic episode on a rendering env that normalises observations with the
    trained ``VecNorm`` statistics (frozen), to the logger; its length in steps."""
    os.environ["MUJOCO_GL"] = os.environ.get("MUJOCO_GL") or "egl"  # headless offscreen GL
    limit = {"max_episode_steps": cfg.video_max_steps} if cfg.video_max_steps else {}
    video_cfg = dataclasses.replace(cfg, num_envs=1)
    with make_env(video_cfg, render_mode="rgb_array", **limit) as video_env:
        trained = next(t for t in env.transform if isinstance(t, VecNorm))
        norm = next(t for t in video_env.transform if isinstance(t, VecNorm))
        norm.load_state_dict(trained.state_dict())
        norm.freeze()
        return record_video(actor, video_env, logger, step=frames).lengths[0]


def steady_fps(steady: tuple[int, float] | None, frames: int) -> float | None:
    """Frames/s after the first batch (the one that compiles), or ``None`` with one batch."""
    if steady is None or frames == steady[0]:
        return None
    return round((frames - steady[0]) / (time.perf_counter() - steady[1]), 1)


def log_scalars(logger, frames: int, mean_return: float | None, fps: float, losses) -> None:
    if mean_return is not None:  # None until an episode finished
        logger.add_scalar("charts/episodic_return", mean_return, frames)
    logger.add_scalar("charts/SPS", fps, frames)
    for key in ("loss_objective", "loss_critic", "entropy", "kl_approx", "clip_fraction"):
        logger.add_scalar(f"losses/{key}", float(losses[key].detach()), frames)


if __name__ == "__main__":
    print(json.dumps(main(parse_args())))
