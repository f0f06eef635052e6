"""PPO on CartPole-v1, top to bottom (CleanRL style).

    uv run examples/ppo_cartpole.py                    # 200k frames, mean return >= 475, < 1 min
    uv run examples/ppo_cartpole.py --profile          # also writes a Chrome trace
    RL_PROFILING=1 uv run examples/ppo_cartpole.py --profile   # ... with our named ranges
    uv run examples/ppo_cartpole.py --checkpoint-dir runs/ppo --checkpoint-every 20000
    uv run examples/ppo_cartpole.py --checkpoint-dir runs/ppo --resume   # after a preemption

The pieces: a ``GymEnv`` over a vector of CartPole envs with ``StepCounter``,
``InitTracker`` and ``RewardSum`` transforms; rl-modules' ``ProbabilisticActor`` (a
categorical policy checked against the action spec) and ``ValueOperator`` over ``MLP`` s; a
``Collector`` yielding ``[num_envs, T]`` batches; ``GAE`` for advantages; a
``TensorDictReplayBuffer`` with ``SamplerWithoutReplacement`` for the minibatch epochs;
``ClipPPOLoss``. The last line printed is one JSON object with the run's figures.
With ``--checkpoint-dir``, a ``Checkpointer`` saves the run (loss module, optimiser, lr
schedule, collector, RNGs) every ``--checkpoint-every`` frames, at the end, and on
SIGTERM (then the script exits cleanly); ``--resume`` continues from the latest one
(see docs/checkpointing.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import deque

import torch
from rl_collectors import Checkpointer, Collector
from rl_envs import GymEnv, InitTracker, RewardSum, StepCounter, TransformedEnv
from rl_modules import MLP, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss, make_update_step
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from rl_trainers import record_video
from tensordict.nn import TensorDictModule
from torch import nn


@dataclasses.dataclass
class Config:
    """PPO hyper-parameters (defaults tuned to solve CartPole-v1 within 200k frames).

    Attributes:
        env_id: gymnasium environment id.
        num_envs: sub-envs in the vector env.
        vectorization_mode: empty for gymnasium's own choice (the env's vector entry
            point where it has one, as CartPole's numpy-vectorised env: one numpy step for
            all sub-envs; else ``"sync"``), or ``"vector_entry_point"``, ``"sync"``,
            ``"async"``; the same dynamics either way.
        steps_per_env: rollout length T per batch (frames_per_batch = num_envs * T).
        total_frames: frames to collect in all.
        lr: Adam learning rate, annealed linearly to 0.
        gamma: discount.
        lmbda: GAE lambda.
        epochs: passes over each batch.
        minibatch_size: frames per gradient step.
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
        video: record one deterministic evaluation episode at the end, to the logger
            (``runs/...`` when ``logdir`` is empty).
        profile: record a torch.profiler Chrome trace of a few batches.
        checkpoint_dir: where checkpoints go; none when empty (SIGTERM still stops cleanly).
        checkpoint_every: frames between checkpoints (0: only at the end and on SIGTERM).
        resume: continue from the latest checkpoint in ``checkpoint_dir``, if any.
        compile: run the update step (loss, backward, clip, Adam) through ``torch.compile``
            (the first minibatch eager, the next compiles; the JSON's ``compile_seconds``).
        cudagraphs: capture the update step in a CUDA graph (``device="cuda"`` only).
        allow_fresh_start: with ``resume``, start from frame 0 when ``checkpoint_dir`` has
            checkpoints but none is intact (else the run stops with an error).
        no_check_finite: turn off the collector's NaN/inf guard (``check_finite``).
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 16
    vectorization_mode: str = ""
    steps_per_env: int = 32
    total_frames: int = 200_000
    lr: float = 1e-3
    gamma: float = 0.98
    lmbda: float = 0.8
    epochs: int = 10
    minibatch_size: int = 256
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
    video: bool = False
    profile: bool = False
    checkpoint_dir: str = ""
    checkpoint_every: int = 0
    resume: bool = False
    compile: bool = False
    cudagraphs: bool = False
    allow_fresh_start: bool = False
    no_check_finite: bool = False


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Config):
        flag = "--" + field.name.replace("_", "-")
        if field.type == "bool":
            parser.add_argument(flag, action="store_true")
        else:
            parser.add_argument(flag, type=type(field.default), default=field.default)
    return Config(**vars(parser.parse_args()))


def make_env(cfg: Config, **gym_kwargs) -> TransformedEnv:
    env = GymEnv(  # integer actions: the Categorical head samples indices
        cfg.env_id, num_envs=cfg.num_envs, vectorization_mode=cfg.vectorization_mode or None,
        categorical_action_encoding=True, **gym_kwargs,
    )
    env = TransformedEnv(env, StepCounter())
    env.append_transform(InitTracker())
    env.append_transform(RewardSum())
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
    n_act = env.action_spec.n
    actor = ProbabilisticActor(
        TensorDictModule(mlp(n_obs, n_act, cfg.hidden, 0.01), ["observation"], ["logits"]),
        ["logits"],
        spec=env.action_spec,
        distribution_class=torch.distributions.Categorical,
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
    # Wiring: the collector runs the actor on the env (sampling actions and log-probs);
    # GAE runs the critic on the batch; the buffer serves the minibatch epochs; the loss
    # reads what the collector and GAE wrote.
    collector = Collector(
        env, actor, frames_per_batch=frames_per_batch, total_frames=cfg.total_frames,
        check_finite=not cfg.no_check_finite,
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=True)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(frames_per_batch, device=cfg.device),
        sampler=SamplerWithoutReplacement(), batch_size=cfg.minibatch_size,
    )
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        critic_coef=cfg.critic_coef,
        loss_critic_type="l2",
    )
    params = list(loss_fn.parameters())
    optim = torch.optim.Adam(
        params, lr=torch.tensor(cfg.lr) if cfg.compile else cfg.lr, eps=1e-5, fused=True
    )  # one kernel for all parameters; a tensor lr, so the schedule does not recompile
    num_batches = -(-cfg.total_frames // frames_per_batch)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda i: 1 - i / num_batches)
    logger, returns = make_logger(cfg), deque(maxlen=20)
    # The run report: every phase timed (and a named range), total time, frames/s; with
    # --profile, a torch.profiler trace of iterations 3-5 (the first 2 warm up).
    timing = RunReport("PPO CartPole", profile="traces/ppo_cartpole.json" if cfg.profile else None)
    # loss, backward, clip and Adam as one update step: eager, it times its phases in the
    # run report (loss, backward, optimiser); with --compile / --cudagraphs it is one graph,
    # timed as one phase (update)
    update = make_update_step(loss_fn, optim, max_grad_norm=cfg.max_grad_norm,
                              compile=cfg.compile, cudagraphs=cfg.cudagraphs, timing=timing)
    # everything a resumed run needs: the collector's state holds its counters and the env
    # transforms'; the loss module holds actor and critic
    ckpt = Checkpointer(cfg.checkpoint_dir, every_frames=cfg.checkpoint_every,
                        loss=loss_fn, optim=optim, sched=sched, collector=collector)
    saved = ckpt.restore(allow_fresh=cfg.allow_fresh_start) if cfg.resume else None
    first, frames = (saved["batch"] + 1, saved["frames"]) if saved else (0, 0)
    returns.extend(saved["returns"] if saved else [])
    from tqdm import tqdm

    bar = tqdm(total=cfg.total_frames, initial=frames, unit="frame", mininterval=1.0)
    resumed_from, start = frames, time.perf_counter()
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
        minibatch = min(cfg.minibatch_size, len(buffer))  # the last batch may be short
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
            if returns:  # no episode finished yet: nothing to report
                logger.add_scalar("charts/episodic_return", mean_return, frames)
            logger.add_scalar("charts/SPS", fps, frames)
            for key in ("loss_objective", "loss_critic", "entropy", "kl_approx", "clip_fraction"):
                logger.add_scalar(f"losses/{key}", float(losses[key].detach()), frames)
    bar.close()
    collector.shutdown()
    ckpt.close()
    seconds = time.perf_counter() - start
    print(timing.report())
    fps_steady = steady_fps(steady, frames)
    compile_seconds = update.compile_seconds
    print(f"update step: {compile_seconds:.1f} s compiling; steady state after the "
          f"first batch: {fps_steady} frames/s")
    result = {
        "frames": frames,
        "seconds": round(seconds, 2),
        "mean_return": round(sum(returns) / max(len(returns), 1), 2),
        "fps": round((frames - resumed_from) / seconds, 1),
        "episodes_in_mean": len(returns),
        "seed": cfg.seed,
        "resumed_from_frames": resumed_from,
        "stopped_by_signal": ckpt.stop_requested is not None,
        "compile_seconds": round(compile_seconds, 2),
        "steady_fps": fps_steady,
    }
    if timing.stop() is not None:
        result["trace"] = timing.trace
        print(f"Chrome trace: {timing.trace} (open in https://ui.perfetto.dev or run "
              f"`rl-profile summary {timing.trace}`)")
    if cfg.video:  # one deterministic episode, rendered, to the logger (rl_trainers)
        video_cfg = dataclasses.replace(cfg, num_envs=1, vectorization_mode="sync")
        with make_env(video_cfg, render_mode="rgb_array") as video_env:
            result["video_return"] = record_video(actor, video_env, logger,
                                                 step=frames).returns[0]
    if logger is not None:
        logger.close()
    return result


def steady_fps(steady: tuple[int, float] | None, frames: int) -> float | None:
    """Frames/s after the first batch (the one that compiles), or ``None`` with one batch."""
    if steady is None or frames == steady[0]:
        return None
    return round((frames - steady[0]) / (time.perf_counter() - steady[1]), 1)


if __name__ == "__main__":
    print(json.dumps(main(parse_args())))
