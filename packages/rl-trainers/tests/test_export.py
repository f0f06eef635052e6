"""evaluate and export: a PPO CartPole policy trained briefly with Trainer, exported with
torch.export, loaded in a fresh process with torch (and gymnasium for the env) only,
reaches the same returns on 10 seeded episodes; bad input is refused."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from rl_collectors import Collector
from rl_envs import GymEnv
from rl_modules import MLP, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss
from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from rl_trainers import (
    EvaluationError,
    ExportError,
    ReplayBufferTrainer,
    Trainer,
    evaluate,
    export_policy,
)
from tensordict.nn import TensorDictModule

FRESH = textwrap.dedent("""
    import json, sys
    import gymnasium as gym
    import torch
    program = torch.export.load(sys.argv[1]).module()
    assert not [m for m in sys.modules if m.startswith(("rl_", "tensordict"))]
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    returns, total = [], 0.0
    while len(returns) < 10:
        action = int(program(torch.as_tensor(obs).unsqueeze(0)).item())
        obs, reward, terminated, truncated, _ = env.step(action)
        total += reward
        if terminated or truncated:
            returns.append(total)
            total = 0.0
            obs, _ = env.reset()
    print(json.dumps(returns))
""")


def _ppo_actor(env) -> tuple:
    torch.manual_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(MLP(4, 2, num_cells=32, depth=2), ["observation"], ["logits"]),
        ["logits"], spec=env.action_spec, distribution_class=torch.distributions.Categorical,
        return_log_prob=True)
    return actor, ValueOperator(MLP(4, 1, num_cells=32, depth=2))


@pytest.mark.timeout(240)
def test_exported_ppo_policy_matches_in_a_fresh_process(tmp_path: Path) -> None:
    env = GymEnv("CartPole-v1", num_envs=8, categorical_action_encoding=True)
    env.set_seed(0)
    actor, critic = _ppo_actor(env)
    collector = Collector(env, actor, frames_per_batch=256, total_frames=2048)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)
    loss = ClipPPOLoss(actor, critic)
    trainer = Trainer(collector=collector, total_frames=2048, optim_steps_per_batch=8,
                      loss_module=loss, optimizer=torch.optim.Adam(loss.parameters(), 3e-3))
    def advantage(batch):
        with torch.no_grad():
            gae(batch)

    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(256),
                                    sampler=SamplerWithoutReplacement())
    trainer.register_op("batch_process", advantage)
    trainer.register_op("batch_process", lambda b: buffer.empty())  # on-policy: this batch
    ReplayBufferTrainer(buffer, batch_size=64, flatten_tensordicts=True).register(trainer)
    trainer.train()
    eval_env = GymEnv("CartPole-v1", num_envs=1, vectorization_mode="sync",
                      categorical_action_encoding=True)
    trained = evaluate(actor, eval_env, episodes=10, seed=0)
    eval_env.close()
    assert len(trained.returns) == 10 and trained.lengths == [int(r) for r in trained.returns]
    path = export_policy(actor, tmp_path / "policy.pt2", torch.zeros(1, 4))
    out = subprocess.run([sys.executable, "-c", FRESH, str(path)], capture_output=True,
                         text=True, timeout=180, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == trained.returns
    # a batch of observations runs through the same program
    program = torch.export.load(path).module()
    assert program(torch.zeros(5, 4)).shape in (torch.Size([5]), torch.Size([5, 1]))


def test_evaluate_refuses_an_action_that_does_not_fit() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    try:
        with pytest.raises(EvaluationError, match="does not fit env.action_spec"):
            evaluate(lambda td: td.set("action", torch.full((2,), 7)), env, episodes=2)
        with pytest.raises(EvaluationError, match="action key"):
            evaluate(lambda td: td.set("act", torch.zeros(2, dtype=torch.long)), env)
        with pytest.raises(EvaluationError, match="episodes must be an int >= 1"):
            evaluate(lambda td: td, env, episodes=0)
    finally:
        env.close()


def test_export_refuses_a_random_policy_and_writes_nothing(tmp_path: Path) -> None:
    random_policy = TensorDictModule(
        lambda obs: torch.randint(0, 2, obs.shape[:-1]), ["observation"], ["action"])
    with pytest.raises(ExportError, match="deterministic-capable"):
        export_policy(random_policy, tmp_path / "p.pt2", torch.zeros(16, 4))
    assert list(tmp_path.iterdir()) == []
