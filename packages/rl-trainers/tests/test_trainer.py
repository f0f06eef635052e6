"""Trainer: TorchRL's hook order, logging through rl_record, checkpoints through
Checkpointer; the hooks (OptimizerHook, ReplayBufferTrainer, LogScalar, CountFramesLog,
UpdateWeights, LogValidationReward, EvalCallback) on real components."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from rl_collectors import Collector
from rl_envs import GymEnv, RewardSum, StepCounter, TransformedEnv
from rl_modules import MLP, ProbabilisticActor
from rl_record import CSVLogger
from rl_replay import LazyTensorStorage, ReplayBuffer
from rl_trainers import (
    HOOK_POINTS,
    CountFramesLog,
    EvalCallback,
    LogScalar,
    LogValidationReward,
    OptimizerHook,
    ReplayBufferTrainer,
    Trainer,
    TrainerError,
    UpdateWeights,
    load_policy,
)
from tensordict import TensorDict
from tensordict.nn import TensorDictModule


def _batches(n: int) -> list[TensorDict]:
    return [TensorDict({"x": torch.randn(4, 3)}, [4]) for _ in range(n)]


def test_hook_points_are_called_in_torchrl_order() -> None:
    net = torch.nn.Linear(3, 1)
    calls: list[str] = []

    def loss(td):
        calls.append("loss")
        return TensorDict({"loss_a": net(td["x"]).pow(2).mean()}, [])

    trainer = Trainer(collector=_batches(2), total_frames=8, optim_steps_per_batch=2,
                      loss_module=loss)
    for dest in HOOK_POINTS:
        takes_batch = dest in ("batch_process", "process_optim_batch", "post_loss", "optimizer")
        if takes_batch or dest.endswith("_log"):
            trainer.register_op(dest, lambda td, d=dest: calls.append(d))
        else:
            trainer.register_op(dest, lambda d=dest: calls.append(d))
    trainer.train()
    inner = ["process_optim_batch", "loss", "post_loss", "optimizer", "post_optim",
             "post_optim_log"]
    one = ["batch_process", "pre_steps_log", "pre_optim_steps", *inner, *inner,
           "post_steps", "post_steps_log"]
    assert calls == one + one
    with pytest.raises(TrainerError, match="dest must be one of"):
        trainer.register_op("post_everything", print)


def _env() -> TransformedEnv:
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), StepCounter())
    return env.append_transform(RewardSum())


def test_off_policy_trainer_logs_and_checkpoints(tmp_path: Path) -> None:
    env = _env()
    net = TensorDictModule(MLP(4, 2, num_cells=16, depth=1), ["observation"], ["logits"])
    actor = ProbabilisticActor(net, ["logits"], spec=env.action_spec,
                               distribution_class=torch.distributions.Categorical)
    collector = Collector(env, actor, frames_per_batch=32, total_frames=128)
    params = list(actor.parameters())

    def loss(td):  # a behaviour-cloning loss on the buffer's samples
        logits = net(td.select("observation").clone())["logits"]
        return TensorDict({"loss_bc": torch.nn.functional.cross_entropy(
            logits, td["action"].long())}, [])

    logger = CSVLogger("run", log_dir=tmp_path)
    trainer = Trainer(collector=collector, total_frames=128, optim_steps_per_batch=3,
                      loss_module=loss, optimizer=torch.optim.Adam(params, 1e-3),
                      logger=logger, log_interval=1, clip_norm=1.0,
                      save_trainer_file=tmp_path / "ckpt", save_trainer_interval=64)
    ReplayBufferTrainer(ReplayBuffer(storage=LazyTensorStorage(1000)), batch_size=16,
                        flatten_tensordicts=True).register(trainer)
    LogScalar().register(trainer)
    CountFramesLog().register(trainer)
    pushes = UpdateWeights(collector, update_weights_interval=2)
    pushes.register(trainer)
    eval_env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    LogValidationReward(record_interval=2, record_frames=10, policy_exploration=actor,
                        environment=eval_env).register(trainer)
    best = EvalCallback(eval_env, actor, eval_freq=2, n_eval_episodes=2,
                        best_model_save_path=tmp_path / "best", seed=0)
    best.register(trainer)
    trainer.train()
    logger.close()
    assert trainer.collected_frames == 128 and trainer.optim_count == 12
    assert pushes.counter == 4 and best.calls == 4
    with open(tmp_path / "run/scalars/n_frames.csv") as f:
        frames = [int(r[0]) for r in csv.reader(f)]
    assert frames == [32, 64, 96, 128]
    for name in ("r_training", "loss_bc", "r_evaluation", "eval/mean_reward"):
        assert (tmp_path / f"run/scalars/{name}.csv").exists(), name
    assert best.best_state_dict is not None
    reloaded = load_policy(ProbabilisticActor(
        TensorDictModule(MLP(4, 2, num_cells=16, depth=1), ["observation"], ["logits"]),
        ["logits"], spec=env.action_spec, distribution_class=torch.distributions.Categorical),
        tmp_path / "best/best_policy.pt")
    for key, value in reloaded.state_dict().items():
        assert torch.equal(value, best.best_state_dict[key])
    eval_env.close()
    collector = Collector(_env(), actor, frames_per_batch=32, total_frames=128)
    resumed = Trainer(collector=collector, total_frames=10, optim_steps_per_batch=1,
                      loss_module=loss, optimizer=torch.optim.Adam(params, 1e-3))
    ReplayBufferTrainer(ReplayBuffer(storage=LazyTensorStorage(1000)),
                        batch_size=16).register(resumed)
    assert resumed.load_from_file(tmp_path / "ckpt")
    assert resumed.collected_frames == 128 and resumed.optim_count == 12
    collector.shutdown()


def test_optimizer_hook_needs_losses() -> None:
    hook = OptimizerHook(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    with pytest.raises(TrainerError, match="expected loss entries"):
        hook(TensorDict({"value": torch.ones(())}, []))
