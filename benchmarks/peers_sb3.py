"""The Stable-Baselines3 side of ``compare_peers.py``: one SB3 training run in this process.

    uv run python benchmarks/peers_sb3.py ppo-cartpole --seed 0 --frames 200000 --target 475

``compare_peers.py`` starts it in a fresh process for each race, with our example's
``Config`` (as JSON, ``--config``) so that SB3 gets the same settings wherever it has
them. It needs the ``peers`` dependency group (``uv sync --group peers``) and nothing of
ours. Episode returns come from SB3's own ``Monitor`` (``info["episode"]``) through a
callback and are measured as our examples measure them: the mean of the last 20 finished
episodes, checked once per batch (after each rollout and its training), the first frame
count at which it reaches the target being the frames to target. The last line printed
is one JSON object: frames, seconds (``learn()`` alone), fps, mean_return,
episodes_in_mean, frames_to_target, seconds_to_target and the settings used.
On Atari, frames are emulator frames (agent steps x the frame skip), as our example counts
them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable

import torch
from stable_baselines3 import PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

WINDOW = 20  # episodes in the running mean, as in our examples
# SB3 gives every model's logger a folder, by default a new tempdir/SB3-<time> that nothing
# removes; every run of this process shares one, deleted at exit
_LOGDIR = tempfile.TemporaryDirectory(prefix="sb3-logs-")
os.environ.setdefault("SB3_LOGDIR", _LOGDIR.name)


class EpisodeLog(BaseCallback):
    """Mean return of the last ``WINDOW`` episodes, and when it first reached ``target``.

    Checked at the start of each rollout (so after the previous rollout's training, as our
    examples log after each batch's update) and at the end of training.
    """

    def __init__(self, target: float | None) -> None:
        super().__init__()
        self.target, self.returns, self.episodes = target, deque(maxlen=WINDOW), 0
        self.start = time.perf_counter()
        self.reached: tuple[int, float] | None = None

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:  # written by Monitor when a (true) episode ends
                self.returns.append(float(info["episode"]["r"]))
                self.episodes += 1
        return True

    def _check(self) -> None:
        if self.reached is None and self.target is not None and self.returns \
                and self.mean() >= self.target:
            self.reached = (self.num_timesteps, time.perf_counter() - self.start)

    def _on_rollout_start(self) -> None:
        self._check()

    def _on_training_end(self) -> None:
        self._check()

    def mean(self) -> float:
        return sum(self.returns) / max(len(self.returns), 1)


def lin(start: float) -> LinearSchedule:
    """RL-Zoo's ``lin_<start>``: from ``start`` down to 0 over the run."""
    return LinearSchedule(start, 0.0, 1.0)


def ppo_cartpole(seed: int, ours: dict) -> tuple[PPO, dict]:
    """RL-Zoo's tuned ``CartPole-v1`` entry (hyperparams/ppo.yml), our network width."""
    env = make_vec_env(ours["env_id"], n_envs=8, seed=seed)
    width = [ours["hidden"]] * 2
    shown = {"n_envs": 8, "vec_env": "DummyVecEnv", "n_steps": 32, "batch_size": 256,
             "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0,
             "learning_rate": "lin_0.001", "clip_range": "lin_0.2",
             "net_arch": {"pi": width, "vf": width}, "activation": "Tanh"}
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=lin(1e-3),
        clip_range=lin(0.2),
        policy_kwargs={"net_arch": {"pi": width, "vf": width}},
        seed=seed,
        device="cpu",
    )
    return model, shown


def ppo_mujoco(seed: int, ours: dict) -> tuple[PPO, dict]:
    """RL-Zoo's MuJoCo defaults (``normalize: true``: VecNormalize of observations and
    rewards, SB3's PPO defaults), with our example's batch, epochs, rates and widths."""
    n, steps = ours["num_envs"], ours["steps_per_env"]
    env = VecNormalize(make_vec_env(ours["env_id"], n_envs=n, seed=seed), gamma=ours["gamma"])
    width = [ours["hidden"]] * 2
    shown = {
        "n_envs": n,
        "vec_env": "DummyVecEnv + VecNormalize(obs, reward, clip 10)",
        "n_steps": steps,
        "batch_size": n * steps // ours["num_minibatches"],
        "n_epochs": ours["epochs"],
        "learning_rate": f"lin_{ours['lr']}",
        "gamma": ours["gamma"],
        "gae_lambda": ours["lmbda"],
        "clip_range": ours["clip_epsilon"],
        "ent_coef": ours["entropy_coef"],
        "vf_coef": ours["critic_coef"],
        "max_grad_norm": ours["max_grad_norm"],
        "net_arch": {"pi": width, "vf": width},
        "activation": "Tanh",
    }
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=steps,
        batch_size=shown["batch_size"],
        n_epochs=ours["epochs"],
        learning_rate=lin(ours["lr"]),
        gamma=ours["gamma"],
        gae_lambda=ours["lmbda"],
        clip_range=ours["clip_epsilon"],
        ent_coef=ours["entropy_coef"],
        vf_coef=ours["critic_coef"],
        max_grad_norm=ours["max_grad_norm"],
        policy_kwargs={"net_arch": {"pi": width, "vf": width}},
        seed=seed,
        device="cpu",
    )
    return model, shown


def sac(seed: int, ours: dict) -> tuple[SAC, dict]:
    """Our example's SAC settings, as far as SB3 has them (one lr for all three optimisers)."""
    n, steps = ours["num_envs"], ours["steps_per_env"]
    env = make_vec_env(ours["env_id"], n_envs=n, seed=seed)
    grad_steps = round(n * steps * ours["updates_per_frame"])  # our updates per collected batch
    width = [ours["hidden"]] * 2
    shown = {
        "n_envs": n,
        "vec_env": "DummyVecEnv",
        "buffer_size": ours["buffer_size"],
        "batch_size": ours["batch_size"],
        "learning_rate": ours["lr"],
        "gamma": ours["gamma"],
        "tau": ours["tau"],
        "learning_starts": ours["learning_starts"],
        "train_freq": [steps, "step"],
        "gradient_steps": grad_steps,
        "ent_coef": "auto (init 1.0)",
        "target_entropy": "auto",
        "net_arch": width,
        "activation": "ReLU",
    }
    model = SAC(
        "MlpPolicy",
        env,
        buffer_size=ours["buffer_size"],
        batch_size=ours["batch_size"],
        learning_rate=ours["lr"],
        gamma=ours["gamma"],
        tau=ours["tau"],
        learning_starts=ours["learning_starts"],
        train_freq=(steps, "step"),
        gradient_steps=grad_steps,
        ent_coef="auto",
        policy_kwargs={"net_arch": width},
        seed=seed,
        device="cpu",
    )
    return model, shown


def td3(seed: int, ours: dict) -> tuple[TD3, dict]:
    """RL-Zoo's MuJoCo TD3 settings as our example's ``--algo td3`` ``Config`` holds them."""
    n, steps = ours["num_envs"], ours["steps_per_env"]
    env = make_vec_env(ours["env_id"], n_envs=n, seed=seed)
    n_act = env.action_space.shape[-1]
    sigma = ours["exploration_noise"] * float(env.action_space.high.max())
    width = [ours["hidden"]] * 2
    shown = {"n_envs": n, "vec_env": "DummyVecEnv", "buffer_size": ours["buffer_size"],
             "batch_size": ours["batch_size"], "learning_rate": ours["lr"],
             "gamma": ours["gamma"], "tau": ours["tau"],
             "learning_starts": ours["learning_starts"], "train_freq": [steps, "step"],
             "gradient_steps": round(n * steps * ours["updates_per_frame"]),
             "policy_delay": ours["policy_delay"], "action_noise": f"normal({sigma})",
             "net_arch": width, "activation": "ReLU"}
    model = TD3("MlpPolicy", env, buffer_size=ours["buffer_size"],
                batch_size=ours["batch_size"], learning_rate=ours["lr"], gamma=ours["gamma"],
                tau=ours["tau"], learning_starts=ours["learning_starts"],
                train_freq=(steps, "step"), gradient_steps=shown["gradient_steps"],
                policy_delay=ours["policy_delay"],
                action_noise=NormalActionNoise(torch.zeros(n_act).numpy(),
                                               sigma * torch.ones(n_act).numpy()),
                policy_kwargs={"net_arch": width}, seed=seed, device="cpu")
    return model, shown


def crossq(seed: int, ours: dict) -> tuple[object, dict]:
    """sb3-contrib's ``CrossQ`` (its documented defaults; sizes as our ``Config``)."""
    from sb3_contrib import CrossQ  # the peers group's sb3-contrib (>= 2.4)

    env = make_vec_env(ours["env_id"], n_envs=ours["num_envs"], seed=seed)
    net_arch = {"pi": [ours["hidden"]] * 2, "qf": [ours["critic_hidden"]] * 2}
    shown = {"learning_rate": ours["lr"], "batch_size": ours["batch_size"],
             "learning_starts": ours["learning_starts"], "policy_delay": ours["policy_delay"],
             "buffer_size": ours["buffer_size"], "net_arch": net_arch}
    model = CrossQ("MlpPolicy", env, learning_rate=ours["lr"], batch_size=ours["batch_size"],
                   learning_starts=ours["learning_starts"], policy_delay=ours["policy_delay"],
                   buffer_size=ours["buffer_size"], policy_kwargs={"net_arch": net_arch},
                   seed=seed, device="cpu")
    return model, shown


def ppo_atari(seed: int, ours: dict) -> tuple[PPO, dict]:
    """RL-Zoo's ``atari`` setup (AtariWrapper, 4 stacked frames, Nature-CNN ``CnnPolicy``)
    with our example's PPO settings."""
    import ale_py
    import cv2
    import gymnasium as gym

    cv2.setNumThreads(1)  # the frame resize: one thread, as torch
    gym.register_envs(ale_py)
    # frameskip 1 and no sticky actions in ALE itself: AtariWrapper skips 4 frames (max of
    # the last two), as on RL-Zoo's BreakoutNoFrameskip-v4
    n, steps = ours["num_envs"], ours["steps_per_env"]
    env_kwargs = {"frameskip": 1, "repeat_action_probability": 0.0}
    env = VecFrameStack(
        make_atari_env(ours["env_id"], n_envs=n, seed=seed, env_kwargs=env_kwargs), n_stack=4
    )
    shown = {
        "n_envs": n,
        "vec_env": "DummyVecEnv + AtariWrapper(frame_skip=4) + VecFrameStack(4)",
        "env_kwargs": env_kwargs,
        "policy": "CnnPolicy",
        "n_steps": steps,
        "n_epochs": ours["epochs"],
        "batch_size": n * steps // ours["num_minibatches"],
        "learning_rate": f"lin_{ours['lr']}",
        "clip_range": ours["clip_epsilon"],
        "gamma": ours["gamma"],
        "gae_lambda": ours["lmbda"],
        "vf_coef": ours["critic_coef"],
        "ent_coef": ours["entropy_coef"],
        "max_grad_norm": ours["max_grad_norm"],
    }
    model = PPO(
        "CnnPolicy",
        env,
        n_steps=steps,
        n_epochs=ours["epochs"],
        batch_size=shown["batch_size"],
        learning_rate=lin(ours["lr"]),
        clip_range=ours["clip_epsilon"],
        gamma=ours["gamma"],
        gae_lambda=ours["lmbda"],
        vf_coef=ours["critic_coef"],
        ent_coef=ours["entropy_coef"],
        max_grad_norm=ours["max_grad_norm"],
        seed=seed,
        device="cpu",
    )
    return model, shown


BUILDERS: dict[str, Callable[[int, dict], tuple]] = {
    "ppo-cartpole": ppo_cartpole,
    "ppo-hopper": ppo_mujoco,
    "sac-pendulum": sac,
    "sac-halfcheetah": sac,
    "td3-halfcheetah": td3,
    "crossq-halfcheetah": crossq,
    "ppo-breakout": ppo_atari,
}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(BUILDERS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--frames", type=int, required=True, help="total_timesteps of learn()")
    parser.add_argument("--target", type=float, default=None, help="mean return to reach")
    parser.add_argument(
        "--config", type=json.loads, required=True, help="our example's Config (JSON)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, shown = BUILDERS[args.task](args.seed, args.config)
    # Atari: our budget and frames are emulator frames, SB3 counts agent steps
    skip = args.config.get("frame_skip", 1) if args.task == "ppo-breakout" else 1
    log = EpisodeLog(args.target)
    start = log.start = time.perf_counter()
    model.learn(total_timesteps=args.frames // skip, callback=log)
    seconds = time.perf_counter() - start
    frames = model.num_timesteps * skip
    return {
        "frames": frames,
        "seconds": round(seconds, 2),
        "fps": round(frames / seconds, 1),
        "mean_return": round(log.mean(), 2),
        "episodes_in_mean": len(log.returns),
        "episodes": log.episodes,
        "frames_to_target": log.reached[0] * skip if log.reached else None,
        "seconds_to_target": round(log.reached[1], 2) if log.reached else None,
        "torch_threads": torch.get_num_threads(),
        "settings": shown,
        "seed": args.seed,
    }


if __name__ == "__main__":
    print(json.dumps(main()))
