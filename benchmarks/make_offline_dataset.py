"""Record a "medium" offline dataset the D4RL way, with this toolkit, as a Minari dataset.

    uv run benchmarks/make_offline_dataset.py            # SAC on HalfCheetah-v5, 1M steps
    uv run benchmarks/make_offline_dataset.py --algo td3 --policy-delay 2
    uv run benchmarks/make_offline_dataset.py --total-frames 2000 --learning-starts 500 \\
        --eval-every 1000 --dataset-size 2000 --dataset-id demo/halfcheetah/tiny-v0

1. Train SAC (or TD3) with ``examples/sac_pendulum.py``'s code path (its env, actor,
   critics, loss and gradient step; ``sac_mujoco.py``'s settings) until the policy's
   deterministic evaluation return reaches ``--target-return`` (D4RL's medium policies
   were stopped at about a third of an expert's return) or ``--total-frames`` run out;
   the policy is saved with ``rl_trainers.save_policy``.
2. The behaviour return: that policy's deterministic evaluation, ``--eval-episodes``
   episodes on a separately seeded env.
3. Record ``--dataset-size`` transitions of the policy acting stochastically (SAC samples
   its ``TanhNormal``; TD3 adds its exploration noise), as D4RL's medium sets were, with a
   ``Collector`` into ``write_minari_dataset``; the metadata holds the behaviour return,
   the target, the frames trained and the seed.

Seeded (torch and envs); the last line printed is one JSON object. The full run (1M
training frames and 1M recorded ones on HalfCheetah) takes hours of an idle machine.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from rl_collectors import Collector  # noqa: E402
from rl_profiling import RunReport  # noqa: E402
from rl_replay import (  # noqa: E402
    LazyTensorStorage,
    RandomSampler,
    TensorDictReplayBuffer,
    write_minari_dataset,  # noqa: E402
)
from rl_trainers import evaluate, save_policy  # noqa: E402
from sac_mujoco import Config as MujocoConfig  # noqa: E402
from sac_pendulum import (  # noqa: E402
    exploring_policy,
    make_agent,
    make_env,
    make_loss,
    parse_args,
    train_step,
)


@dataclasses.dataclass
class Config(MujocoConfig):
    """``sac_mujoco.py``'s settings, plus what the dataset needs.

    Attributes:
        total_frames: most frames to train on (the run stops earlier at the target).
        target_return: stop training when the deterministic evaluation reaches it.
        eval_every: training frames between evaluations.
        eval_episodes: deterministic episodes per evaluation (and for the behaviour return).
        dataset_size: transitions to record.
        record_envs: sub-envs of the recording env.
        dataset_id: the Minari id to write.
        minari_root: Minari's dataset folder (empty: ``$MINARI_DATASETS_PATH`` or
            ``~/.minari/datasets``).
        policy_path: where the trained policy is saved (empty: ``<dataset_id>.pt`` in the
            working directory, ``/`` replaced by ``_``).
    """

    total_frames: int = 1_000_000
    target_return: float = 4_000.0
    eval_every: int = 20_000
    eval_episodes: int = 10
    dataset_size: int = 1_000_000
    record_envs: int = 4
    dataset_id: str = "rl/halfcheetah/medium-v0"
    minari_root: str = ""
    policy_path: str = ""


def train(cfg: Config, env):
    """SAC/TD3 as ``sac_pendulum.main`` runs it, stopped at the target; ``(actor, frames,
    last evaluation)``."""
    actor, qvalue = make_agent(env, cfg)
    loss_fn, target_updater = make_loss(actor, qvalue, env, cfg)
    optim = torch.optim.Adam([p for p in loss_fn.parameters() if p.requires_grad], lr=cfg.lr)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.buffer_size),
                                    sampler=RandomSampler(), batch_size=cfg.batch_size)
    collector = Collector(env, exploring_policy(actor, env, cfg),
                          frames_per_batch=cfg.num_envs * cfg.steps_per_env,
                          total_frames=cfg.total_frames, init_random_frames=cfg.learning_starts)
    eval_env = make_env(dataclasses.replace(cfg, num_envs=1, seed=cfg.seed + 10_000))
    frames, updates, owed, last = 0, 0, 0.0, float("nan")
    timing = RunReport("dataset policy")
    for batch in collector:
        frames += batch.numel()
        buffer.extend(batch.reshape(-1))
        if frames >= cfg.learning_starts:
            owed += batch.numel() * cfg.updates_per_frame
            while owed >= 1.0:
                train_step(buffer, loss_fn, optim, target_updater, timing,
                           actor_step=updates % cfg.policy_delay == 0)
                owed, updates = owed - 1.0, updates + 1
        if frames % cfg.eval_every < batch.numel() and frames >= cfg.learning_starts:
            last = evaluate(actor, eval_env, cfg.eval_episodes, seed=cfg.seed).mean_return
            if last >= cfg.target_return:
                break
    collector.shutdown()
    eval_env.close()
    return actor, frames, last


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    start = time.perf_counter()
    env = make_env(cfg)
    actor, frames, last = train(cfg, env)
    env.close()
    policy_path = Path(cfg.policy_path or cfg.dataset_id.replace("/", "_") + ".pt")
    save_policy(actor, policy_path)
    # the behaviour return: the policy's deterministic evaluation on its own seeds
    with make_env(dataclasses.replace(cfg, num_envs=1, seed=cfg.seed + 20_000)) as eval_env:
        behaviour = evaluate(actor, eval_env, cfg.eval_episodes, seed=cfg.seed + 20_000)
    trained = time.perf_counter() - start
    record_env = make_env(dataclasses.replace(cfg, num_envs=cfg.record_envs, seed=cfg.seed + 1))
    steps = max(1, min(cfg.dataset_size // cfg.record_envs, 1000))
    collector = Collector(record_env, exploring_policy(actor, record_env, cfg),
                          frames_per_batch=steps * cfg.record_envs, total_frames=cfg.dataset_size)
    metadata = {"algorithm_name": f"{cfg.algo.upper()} medium policy, acting stochastically",
                "behaviour_return": behaviour.mean_return,
                "behaviour_return_std": behaviour.std_return, "target_return": cfg.target_return,
                "train_frames": frames, "seed": cfg.seed, "env_id": cfg.env_id,
                "description": "recorded by benchmarks/make_offline_dataset.py"}
    path = write_minari_dataset(cfg.dataset_id, collector, root=cfg.minari_root or None,
                                env_id=cfg.env_id, metadata=metadata)
    collector.shutdown()
    return {
        "dataset_id": cfg.dataset_id, "path": str(path), "policy_path": str(policy_path),
        "train_frames": frames, "last_training_eval": round(last, 2),
        "behaviour_return": round(behaviour.mean_return, 2),
        "dataset_size": cfg.dataset_size, "seed": cfg.seed,
        "train_seconds": round(trained, 1),
        "record_seconds": round(time.perf_counter() - start - trained, 1),
    }


if __name__ == "__main__":
    print(json.dumps(main(parse_args(Config, __doc__))))
