"""PPO on Atari (ALE/Breakout-v5 by default), top to bottom (CleanRL style).

    uv run examples/ppo_atari.py                           # Breakout, 2M frames (agent steps x 4)
    uv run examples/ppo_atari.py --env-id ALE/Pong-v5      # any ALE game

The pieces: a ``GymEnv`` over ALE's own C++ vector env, which does the Atari
preprocessing itself (84x84 grayscale, 4 stacked frames, frame skip 4 with max-pooling,
up to 30 no-ops and FIRE at reset); ``EndOfLifeTransform`` (a life lost is a training-only
done: GAE does not bootstrap across it, the episode and its return go on),
``RewardSum`` (the true score) and ``SignTransform`` (rewards clipped to -1/0/1 for
learning, after the sum). rl-modules' ``ActorValueOperator``: a ``NatureCNN`` trunk on the
uint8 frames shared by a categorical ``ProbabilisticActor`` head and a ``ValueOperator``
head. ``GAE`` and ``ClipPPOLoss`` with CleanRL's ``ppo_atari.py`` defaults (8 envs x 128
steps, 4 epochs of 4 minibatches, lr 2.5e-4 annealed, clip 0.1, entropy 0.01). Frames are
agent steps x frame skip, as CleanRL and the ALE count them. The learning rate anneals over
CleanRL's budget (10M agent steps, 40M frames) whatever ``--total-frames`` is, so a shorter
run follows CleanRL's schedule (and its published curves) up to where it stops, rather than
annealing to 0 within it. The last line printed is one JSON object with the run's figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import deque

import torch
from rl_collectors import Checkpointer, Collector
from rl_envs import (
    CatFrames,
    EndOfLifeTransform,
    GrayScale,
    GymEnv,
    RenameTransform,
    Resize,
    RewardSum,
    SignTransform,
    ToTensorImage,
    TransformedEnv,
)
from rl_modules import ActorValueOperator, NatureCNN, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss, make_update_step
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from rl_trainers import record_video
from tensordict.nn import TensorDictModule
from torch import nn


@dataclasses.dataclass
class Config:
    """PPO hyper-parameters (CleanRL's ``ppo_atari.py`` defaults).

    Attributes:
        env_id: an ALE id (``ALE/<Game>-v5``).
        num_envs: sub-envs of ALE's vector env.
        steps_per_env: rollout length T per batch (agent steps).
        total_frames: emulator frames in all (agent steps x frame_skip).
        frame_skip: emulator frames per agent step (ALE's ``frameskip``).
        lr: Adam learning rate, annealed linearly to 0 over ``anneal_frames``.
        anneal_frames: emulator frames over which ``lr`` goes to 0 (CleanRL's 10M agent
            steps); a run shorter than this stops with the rate above 0.
        gamma: discount.
        lmbda: GAE lambda.
        epochs: passes over each batch.
        num_minibatches: minibatches per epoch.
        clip_epsilon: PPO ratio clip.
        entropy_coef: entropy bonus weight.
        critic_coef: value loss weight.
        max_grad_norm: gradient clipping norm.
        seed: seed of torch and of the envs.
        threads: torch intra-op threads (the CNN uses them).
        device: device of the networks and the loss.
        logdir: where the logger writes (its last part names the run; scalars named like
            CleanRL's); none when empty.
        logger: ``csv``, ``tensorboard``, ``wandb`` (offline unless WANDB_MODE=online) or
            ``mlflow`` (``rl_record.experiment_logger``).
        profile: Chrome trace path: iterations 3-5 under torch.profiler, ranges included
            with ``RL_PROFILING=1`` (read it with ``rl-profile summary``); none when empty.
        checkpoint_dir: where checkpoints go; none when empty (SIGTERM still stops cleanly).
        checkpoint_every: frames (emulator frames) between checkpoints (0: only at the end
            and on SIGTERM).
        resume: continue from the latest checkpoint in ``checkpoint_dir``, if any.
        allow_fresh_start: with ``resume``, start from frame 0 when ``checkpoint_dir`` has
            checkpoints but none is intact (else the run stops with an error).
        no_check_finite: turn off the collector's NaN/inf guard (``check_finite``).
        compile: run the update step (loss, backward, clip, Adam) through ``torch.compile``
            (the first minibatch eager, the next compiles; the JSON's ``compile_seconds``).
        cudagraphs: capture the update step in a CUDA graph (``device="cuda"`` only).
        video: record one deterministic evaluation episode at the end, to the logger (ALE's
            own RGB screen, 210x160; see :func:`make_video_env`).
        video_max_steps: the recorded episode's agent-step limit (a truncation; ALE's
            default is 108,000 frames).
    """

    env_id: str = "ALE/Breakout-v5"
    num_envs: int = 8
    steps_per_env: int = 128
    total_frames: int = 2_000_000
    frame_skip: int = 4
    lr: float = 2.5e-4
    anneal_frames: int = 40_000_000
    gamma: float = 0.99
    lmbda: float = 0.95
    epochs: int = 4
    num_minibatches: int = 4
    clip_epsilon: float = 0.1
    entropy_coef: float = 0.01
    critic_coef: float = 0.5
    max_grad_norm: float = 0.5
    seed: int = 0
    threads: int = 2
    device: str = "cpu"
    logdir: str = ""
    logger: str = "tensorboard"
    profile: str = ""
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    resume: bool = False
    allow_fresh_start: bool = False
    no_check_finite: bool = False
    compile: bool = False
    cudagraphs: bool = False
    video: bool = False
    video_max_steps: int = 27_000


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Config):
        kind, more = type(field.default), {}
        if kind is bool:  # `--resume` or `--resume false`
            kind, more = (
                (lambda v: v.lower() in ("1", "true", "yes")),
                {"nargs": "?", "const": True},
            )
        parser.add_argument(
            "--" + field.name.replace("_", "-"), type=kind, default=field.default, **more
        )
    return Config(**vars(parser.parse_args()))


def make_env(cfg: Config) -> TransformedEnv:
    base = GymEnv(cfg.env_id, num_envs=cfg.num_envs, info_keys=["lives"], frameskip=cfg.frame_skip,
                  reward_clipping=False, repeat_action_probability=0.0,
                  categorical_action_encoding=True)  # the Categorical head samples indices
    env = TransformedEnv(base, EndOfLifeTransform())
    env.append_transform(RewardSum())      # the true score, before clipping
    env.append_transform(SignTransform())  # learn from -1/0/1
    env.set_seed(cfg.seed)
    return env


def make_video_env(cfg: Config) -> TransformedEnv:
    """One ALE env that renders its RGB screen (ALE's C++ vector env cannot render), its
    observation rebuilt as the training env's: the frame skip, grayscale, 84x84 and 4
    stacked frames (as floats in [0, 1]: ``NatureCNN`` scales uint8 frames to that); unlike
    ALE's vector env, no max over the last two skipped frames and no no-ops or FIRE at
    reset."""
    base = GymEnv(cfg.env_id, num_envs=1, vectorization_mode="sync", render_mode="rgb_array",
                  frameskip=cfg.frame_skip, repeat_action_probability=0.0,
                  max_episode_steps=cfg.video_max_steps, categorical_action_encoding=True)
    env = TransformedEnv(base, ToTensorImage())  # a single ALE env's RGB frames: "pixels"
    for transform in (GrayScale(), Resize(84, 84), CatFrames(N=4, dim=-3),
                      RenameTransform(["pixels"], ["observation"]), RewardSum()):
        env.append_transform(transform)
    env.set_seed(cfg.seed)
    return env


def layer_init(module: nn.Module, std: float) -> nn.Module:
    nn.init.orthogonal_(module.weight, std)
    nn.init.zeros_(module.bias)
    return module


def make_agent(env: TransformedEnv, cfg: Config) -> ActorValueOperator:
    frames = env.observation_spec["observation"].shape[-3]
    cnn = NatureCNN(in_channels=frames)
    for m in cnn.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            layer_init(m, 2**0.5)
    trunk = TensorDictModule(cnn, ["observation"], ["hidden"])
    head = TensorDictModule(
        layer_init(nn.Linear(512, env.action_spec.n), 0.01), ["hidden"], ["logits"]
    )
    policy = ProbabilisticActor(
        head,
        ["logits"],
        spec=env.action_spec,
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    value = ValueOperator(layer_init(nn.Linear(512, 1), 1.0), in_keys=["hidden"])
    return ActorValueOperator(trunk, policy, value).to(cfg.device)


def make_logger(cfg: Config):
    # rl_record: --logger csv|tensorboard|wandb|mlflow under --logdir (CleanRL's names)
    return experiment_logger(cfg.logger, cfg.logdir, cfg, video=cfg.video, model_name="ppo")


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)
    env = make_env(cfg)
    model = make_agent(env, cfg)
    actor, critic = model.get_policy_operator(), model.get_value_operator()
    steps_per_batch = cfg.num_envs * cfg.steps_per_env
    total_steps = max(cfg.total_frames // cfg.frame_skip, steps_per_batch)
    minibatch = steps_per_batch // cfg.num_minibatches
    # Wiring: the collector runs the whole model (trunk, policy and value heads) on the env,
    # so each step's value comes with its action, as SB3 and CleanRL get it; GAE then runs
    # the critic only on the next steps that are not the following row (each sub-env's last
    # step, and after a reset: `shifted`, `skip_existing`) and reads a lost life as the end
    # of an episode; the loss trains both heads and the shared trunk from the minibatches.
    collector = Collector(env, model, frames_per_batch=steps_per_batch, total_frames=total_steps,
                          check_finite=not cfg.no_check_finite)
    eol = env.transform[0]
    advantage = eol.register_keys(GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic,
                                      shifted=True, skip_existing=True))
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(steps_per_batch, device=cfg.device),
                                    sampler=SamplerWithoutReplacement(), batch_size=minibatch)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        critic_coef=cfg.critic_coef,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    params = list(model.parameters())
    graph = cfg.compile or cfg.cudagraphs  # a tensor lr: the schedule does not recompile
    optim = torch.optim.Adam(params, lr=torch.tensor(cfg.lr) if graph else cfg.lr, eps=1e-5,
                             capturable=cfg.cudagraphs)
    num_batches = -(-total_steps // steps_per_batch)
    anneal_batches = max(cfg.anneal_frames // cfg.frame_skip // steps_per_batch, num_batches)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda i: 1 - i / anneal_batches)
    logger, returns = make_logger(cfg), deque(maxlen=20)
    timing = RunReport(
        f"PPO {cfg.env_id}", profile=cfg.profile or None
    )  # every phase timed; a trace
    # loss, backward, clip and Adam as one update step: eager, it times its phases in the
    # run report (loss, backward, optimiser); with --compile / --cudagraphs it is one graph,
    # timed as one phase (update)
    update = make_update_step(loss_fn, optim, max_grad_norm=cfg.max_grad_norm,
                              compile=cfg.compile, cudagraphs=cfg.cudagraphs, timing=timing)
    from tqdm import tqdm

    ckpt = Checkpointer(cfg.checkpoint_dir, every_frames=cfg.checkpoint_every,
                        loss=loss_fn, optim=optim, sched=sched, collector=collector)
    saved = ckpt.restore(allow_fresh=cfg.allow_fresh_start) if cfg.resume else None
    first, steps = (saved["batch"] + 1, saved["steps"]) if saved else (0, 0)
    returns.extend(saved["returns"] if saved else [])
    bar = tqdm(total=total_steps * cfg.frame_skip, initial=steps * cfg.frame_skip, unit="frame",
               mininterval=1.0)
    resumed_from, start, losses = steps * cfg.frame_skip, time.perf_counter(), None
    steady = None  # (frames, time) after the first batch, which compiles
    batches = iter(collector)
    for i in range(first, num_batches):
        with timing.add_time("collect"):
            batch = next(batches)
        steps += batch.numel()
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
        timing.step(batch.numel() * cfg.frame_skip)  # emulator frames, as the bar and JSON
        frames = steps * cfg.frame_skip
        steady = steady or (frames, time.perf_counter())
        mean_return = sum(returns) / max(len(returns), 1)
        extra = {"batch": i, "steps": steps, "returns": list(returns)}
        if ckpt.step(frames, extra, final=i == num_batches - 1):
            break  # SIGTERM: the checkpoint is written, stop cleanly
        fps = (frames - resumed_from) / (time.perf_counter() - start)
        bar.update(batch.numel() * cfg.frame_skip)
        bar.set_postfix(fps=f"{fps:,.0f}", ret=f"{mean_return:.1f}", refresh=False)
        if logger is not None:
            log_scalars(logger, frames, mean_return if returns else None, fps, losses)
    bar.close()
    collector.shutdown()
    ckpt.close()
    seconds = time.perf_counter() - start
    timing.stop()
    print(timing.report())
    fps_steady = steady_fps(steady, steps * cfg.frame_skip)
    print(f"update step: {update.compile_seconds:.1f} s compiling; steady state after the "
          f"first batch: {fps_steady} frames/s")
    if timing.trace:
        print(f"Chrome trace: {timing.trace} (read it with `rl-profile summary {timing.trace}`)")
    frames = steps * cfg.frame_skip
    video = None
    if cfg.video:  # one deterministic episode, ALE's screen, to the logger (rl_trainers)
        with make_video_env(cfg) as video_env:
            video = record_video(actor, video_env, logger, step=frames)
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
        "env_id": cfg.env_id,
        "video_return": video.returns[0] if video else None,
        "video_length": video.lengths[0] if video else None,
        "compile_seconds": round(update.compile_seconds, 2),
        "steady_fps": fps_steady,
    }


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
