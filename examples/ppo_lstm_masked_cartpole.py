"""Recurrent PPO (LSTM) on CartPole-v1 with the velocities hidden, top to bottom (CleanRL style).

    uv run examples/ppo_lstm_masked_cartpole.py        # 1M frames; target: mean return >= 400

Status: reaches the target and holds it. With these defaults (docs/results.md, 3 seeds,
2026-11-24 08:49-08:55, after the scan backend's products moved to oneDNN) the mean
return crossed 400 at 63k-109k frames and was 500, 500 and 495 at 1M frames, at
9,500-9,700 frames/s; before that change, the same day, 68k-92k frames and 500 on every
seed (4,600-5,400 frames/s on the slower VM of 03:00, 9,700-9,800 on this one). Until
2026-11-24 the same code crossed 400 at 346k-610k frames
and fell back to 114-314 by 1M: ``TensorDictPrimer``'s fast step copied only its first
key into ``"next"`` on steps where no sub-env finished, so ``("next",
"recurrent_state_c")`` was stale on most steps and ``add_values`` computed ``V(s_{t+1})``
from the wrong cell state (the critic's explained variance stayed at 0.0-0.6; the same
pipeline with the velocities visible peaked at 228 and fell to ~90). The hyper-parameters
below were tuned while that bug was in place and have not been re-tuned since.

Hiding the cart and pole velocities (observation entries 1 and 3) makes CartPole a
POMDP: a memoryless policy sees positions only and cannot tell which way the pole moves;
an LSTM can infer the velocities from consecutive positions.

The pieces: a ``GymEnv`` over a vector of CartPole envs with a small ``MaskVelocity``
transform (defined below), an ``ObservationNorm`` scaling the two positions by
CartPole's termination bounds, ``InitTracker``, the LSTM's ``TensorDictPrimer`` and
``RewardSum``; a ``Linear + Tanh`` encoder and an ``LSTMModule`` trunk shared by the
actor's and the critic's MLP heads; a
``Collector`` that runs the LSTM step by step (sequential mode) and stores its hidden
states in the ``[num_envs, T]`` batch; the critic in recurrent mode for ``V(s_t)`` and
one LSTM step from the stored next states for ``V(s_{t+1})``; ``GAE``; ``ClipPPOLoss``
in recurrent mode over minibatches of whole ``T``-step rows. The last line printed is
one JSON object with the run's figures.
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
    GymEnv,
    InitTracker,
    ObservationNorm,
    RewardSum,
    Transform,
    TransformedEnv,
    Unbounded,
)
from rl_objectives import GAE, ClipPPOLoss
from rl_profiling import RunReport
from rl_record import experiment_logger
from rl_recurrent import LSTMModule, set_recurrent_mode
from rl_trainers import record_video
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)
from torch import nn


@dataclasses.dataclass
class Config:
    """Recurrent PPO hyper-parameters (target: >= 400 within 1M frames).

    Attributes:
        env_id: gymnasium environment id.
        num_envs: sub-envs in the vector env (rows of a batch).
        steps_per_env: rollout length T per batch (frames_per_batch = num_envs * T); the
            loss sees whole T-step rows, starting from the stored hidden state.
        total_frames: frames to collect in all.
        lr: Adam learning rate, annealed linearly to 0.
        gamma: discount.
        lmbda: GAE lambda.
        epochs: passes over each batch.
        num_minibatches: minibatches (of num_envs / num_minibatches rows) per epoch.
        clip_epsilon: PPO ratio clip.
        entropy_coef: entropy bonus weight.
        critic_coef: value loss weight.
        max_grad_norm: gradient clipping norm.
        reward_scale: factor on the rewards seen by the critic and GAE (the reported
            returns stay unscaled). It keeps the value targets of long episodes small
            (<= 10 instead of <= 100 at gamma 0.99): at 1.0 the value loss dominates the
            trunk the actor shares (runs with the primer bug above saw the critic's output
            go flat or the policy collapse; not re-checked since the fix).
        hidden: LSTM hidden size.
        seed: seed of torch and of the envs.
        threads: torch intra-op threads.
        device: device of the networks and the loss (the collector steps on the CPU).
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
        allow_fresh_start: with ``resume``, start from frame 0 when ``checkpoint_dir`` has
            checkpoints but none is intact (else the run stops with an error).
        no_check_finite: turn off the collector's NaN/inf guard (``check_finite``).
    """

    env_id: str = "CartPole-v1"
    num_envs: int = 32
    steps_per_env: int = 64
    total_frames: int = 1_000_000
    lr: float = 1e-3
    gamma: float = 0.99
    lmbda: float = 0.95
    epochs: int = 4
    num_minibatches: int = 2
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    critic_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 0.1
    hidden: int = 64
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
    allow_fresh_start: bool = False
    no_check_finite: bool = False


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


class MaskVelocity(Transform):
    """Keep only the ``keep`` entries of ``observation`` (CartPole: positions 0 and 2).

    Follows the env transforms' fast-hook contract: ``bind`` swaps in smaller leaves, the
    hooks fill them in place from the inner env's full observation.
    """

    def __init__(self, keep: tuple[int, ...] = (0, 2)) -> None:
        super().__init__(["observation"], ["observation"])
        self.keep = list(keep)

    def transform_observation_spec(self, spec):
        old = spec["observation"]
        spec["observation"] = Unbounded((*old.shape[:-1], len(self.keep)), old.device, old.dtype)
        return spec

    def bind(self, root, next):
        self._pairs = []
        outs = []
        for td in (root, next):
            src = td.get("observation")
            out = td.copy()
            leaf = torch.zeros(*src.shape[:-1], len(self.keep), dtype=src.dtype, device=src.device)
            out.set("observation", leaf)
            self._pairs.append((self._view(src), self._view(leaf)))
            outs.append(out)
        return outs[0], outs[1]

    def _apply(self) -> None:
        for src, dst in self._pairs:
            dst[...] = src[..., self.keep]

    def on_reset(self, mask) -> None:
        self._apply()

    def on_step(self) -> None:
        self._apply()
        return None


def make_agent(cfg: Config):
    """Encoder -> LSTM trunk shared by an MLP policy head and an MLP value head.

    The ``Linear + Tanh`` encoder matters: fed the two raw (normalised) positions, a freshly
    initialised LSTM's output barely varies with the input (|h| ~ 0.05), so the policy
    head got almost no signal and the return stayed at a random policy's ~20 through
    510k frames; with the encoder it starts to climb within 100k frames.
    """
    encoder = TensorDictModule(
        nn.Sequential(nn.Linear(2, cfg.hidden, device=cfg.device), nn.Tanh()),
        ["observation"],
        ["features"],
    )
    lstm = LSTMModule(cfg.hidden, cfg.hidden, in_key="features", out_key="embed", device=cfg.device)
    policy_last = nn.Linear(cfg.hidden, 2, device=cfg.device)
    value_last = nn.Linear(cfg.hidden, 1, device=cfg.device)
    policy_head = nn.Sequential(
        nn.Linear(cfg.hidden, cfg.hidden, device=cfg.device), nn.Tanh(), policy_last
    )
    value_head = nn.Sequential(
        nn.Linear(cfg.hidden, cfg.hidden, device=cfg.device), nn.Tanh(), value_last
    )
    nn.init.orthogonal_(policy_last.weight, 0.01)
    nn.init.zeros_(policy_last.bias)
    nn.init.orthogonal_(value_last.weight, 1.0)
    nn.init.zeros_(value_last.bias)
    actor = ProbabilisticTensorDictSequential(
        encoder,
        lstm,
        TensorDictModule(policy_head, ["embed"], ["logits"]),
        ProbabilisticTensorDictModule(
            ["logits"],
            ["action"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
            log_prob_key="sample_log_prob",
        ),
    )
    critic = TensorDictSequential(
        encoder, lstm, TensorDictModule(value_head, ["embed"], ["state_value"])
    )
    return lstm, actor, critic


def make_env(cfg: Config, lstm: LSTMModule, **gym_kwargs) -> TransformedEnv:
    env = GymEnv(cfg.env_id, num_envs=cfg.num_envs, categorical_action_encoding=True,
                 **gym_kwargs)  # integer actions: the Categorical head samples indices
    env = TransformedEnv(env, MaskVelocity())
    # positions are ~0.01-0.1 early on: scale them by CartPole's termination bounds (cart
    # +-2.4, pole +-0.2095 rad) so the LSTM sees values of order one from the start
    env.append_transform(
        ObservationNorm(loc=torch.zeros(2), scale=1.0 / torch.tensor([2.4, 0.2095]))
    )
    env.append_transform(InitTracker())
    env.append_transform(lstm.make_tensordict_primer())
    env.append_transform(RewardSum())
    env.set_seed(cfg.seed)
    return env


def make_logger(cfg: Config):
    # rl_record: --logger csv|tensorboard|wandb|mlflow under --logdir (CleanRL's names)
    return experiment_logger(cfg.logger, cfg.logdir, cfg, video=cfg.video, model_name="ppo_lstm")


@torch.no_grad()
def add_values(batch, critic: TensorDictSequential) -> None:
    """``state_value`` (recurrent mode over the rows, from the stored first hidden state)
    and ``("next", "state_value")`` (one LSTM step from each stored next hidden state:
    exact for every t, truncated final observations included)."""
    with set_recurrent_mode(True):
        batch["state_value"] = critic(batch.select(*critic.in_keys).copy())["state_value"]
    nxt = batch["next"]
    step = TensorDict({
        "observation": nxt["observation"],
        "is_init": torch.zeros_like(batch["is_init"]),
        "recurrent_state_h": nxt["recurrent_state_h"],
        "recurrent_state_c": nxt["recurrent_state_c"],
    }, batch_size=batch.batch_size).reshape(-1)
    nxt["state_value"] = critic(step)["state_value"].reshape(*batch.batch_size, 1)


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)  # no per-call checks
    lstm, actor, critic = make_agent(cfg)
    env = make_env(cfg, lstm)
    frames_per_batch = cfg.num_envs * cfg.steps_per_env
    # Wiring: the collector runs the actor step by step (the LSTM carries its state through
    # the primer's keys and resets it where is_init); add_values + GAE turn the batch into
    # advantages; the loss replays whole rows in recurrent mode with the same weights.
    collector = Collector(
        env,
        actor,
        frames_per_batch=frames_per_batch,
        total_frames=cfg.total_frames,
        check_finite=not cfg.no_check_finite,
        policy_device=cfg.device,
    )
    advantage = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, average_gae=True)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=cfg.clip_epsilon,
        entropy_coef=cfg.entropy_coef,
        critic_coef=cfg.critic_coef,
        loss_critic_type="l2",
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=cfg.lr, eps=1e-5)
    num_batches = -(-cfg.total_frames // frames_per_batch)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda i: 1 - i / num_batches)
    logger, returns = make_logger(cfg), deque(maxlen=20)
    timing = RunReport("recurrent PPO", profile=cfg.profile or None)  # every phase timed; a trace
    from tqdm import tqdm

    # the collector's state holds its counters and the env transforms' statistics; the loss
    # module holds actor and critic
    ckpt = Checkpointer(cfg.checkpoint_dir, every_frames=cfg.checkpoint_every,
                        loss=loss_fn, optim=optim, sched=sched, collector=collector)
    saved = ckpt.restore(allow_fresh=cfg.allow_fresh_start) if cfg.resume else None
    first, frames = (saved["batch"] + 1, saved["frames"]) if saved else (0, 0)
    returns.extend(saved["returns"] if saved else [])
    bar = tqdm(total=cfg.total_frames, initial=frames, unit="frame", mininterval=1.0)
    resumed_from, start = frames, time.perf_counter()
    batches = iter(collector)
    for i in range(first, num_batches):
        with timing.add_time("collect"):
            batch = next(batches).to(cfg.device)
        frames += batch.numel()
        done = batch["next", "done"].squeeze(-1)
        returns.extend(batch["next", "episode_reward"][done].flatten().tolist())
        with timing.add_time("advantage"):
            batch["next", "reward"] = batch["next", "reward"] * cfg.reward_scale
            add_values(batch, critic)
            advantage(batch)
        losses = train_epochs(batch, loss_fn, optim, cfg, timing)
        sched.step()
        with timing.add_time("weight_push"):
            collector.update_policy_weights_()
        timing.step(batch.numel())
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
            for key in ("loss_objective", "loss_critic", "entropy", "kl_approx", "clip_fraction",
                        "explained_variance"):
                logger.add_scalar(f"losses/{key}", float(losses[key].detach()), frames)
    bar.close()
    collector.shutdown()
    ckpt.close()
    seconds = time.perf_counter() - start
    timing.stop()
    print(timing.report())
    if timing.trace:
        print(f"Chrome trace: {timing.trace} (read it with `rl-profile summary {timing.trace}`)")
    if cfg.video:  # one deterministic episode, rendered, to the logger (rl_trainers)
        video_cfg = dataclasses.replace(cfg, num_envs=1)
        with make_env(video_cfg, lstm, render_mode="rgb_array") as video_env:
            record_video(actor, video_env, logger, step=frames)
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
    }


def train_epochs(batch, loss_fn: ClipPPOLoss, optim, cfg: Config, timing: RunReport):
    """``epochs`` passes over the batch in minibatches of whole rows (recurrent mode)."""
    # what the collector wrote and the loss recomputes is dropped (as in the recurrent
    # integration test); the stored hidden state of each row's first step stays
    data = batch.exclude(
        "features",
        "embed",
        "logits",
        ("next", "recurrent_state_h"),
        ("next", "recurrent_state_c"),
        ("next", "state_value"),
    )
    rows = max(data.shape[0] // cfg.num_minibatches, 1)
    for _ in range(cfg.epochs):
        perm = torch.randperm(data.shape[0], device=data.device)
        for start in range(0, data.shape[0] - rows + 1, rows):
            with timing.add_time("loss"), set_recurrent_mode(True):
                losses = loss_fn(data[perm[start:start + rows]])
                loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            with timing.add_time("backward"):
                optim.zero_grad(set_to_none=True)
                loss.backward()
            with timing.add_time("optimiser"):
                nn.utils.clip_grad_norm_(loss_fn.parameters(), cfg.max_grad_norm)
                optim.step()
    return losses


if __name__ == "__main__":
    print(json.dumps(main(parse_args())))
