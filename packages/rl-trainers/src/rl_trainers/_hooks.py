"""The Trainer hooks of TorchRL's tutorials: ``OptimizerHook``, ``ReplayBufferTrainer``,
``LogScalar``, ``CountFramesLog``, ``UpdateWeights`` and ``LogValidationReward``.

Each hook has ``register(trainer, name=...)`` that registers it at TorchRL's default hook
point(s); ``trainer.register_op(dest, hook)`` places it elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from rl_envs import EnvBase
from rl_modules import ExplorationType, set_exploration_type
from tensordict import TensorDictBase

from rl_trainers._trainer import Trainer, clip_gradients
from rl_trainers.exceptions import TrainerError

__all__ = [
    "CountFramesLog", "LogScalar", "LogValidationReward", "OptimizerHook",
    "ReplayBufferTrainer", "UpdateWeights",
]


class OptimizerHook:
    """Sum the losses, backward, clip, step and zero the gradients (``"optimizer"``).

    Args:
        optimizer: the optimizer.
        loss_components: the loss keys summed (default: every key starting with ``loss``).
        clip_grad_norm: clip the total norm (else each value); None: the trainer's setting.
        clip_norm: the threshold; None: the trainer's setting (none when it has none).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> w = torch.nn.Parameter(torch.ones(2))
        >>> hook = OptimizerHook(torch.optim.SGD([w], lr=0.5))
        >>> out = hook(TensorDict({"loss_a": (w ** 2).sum(), "other": torch.ones(())}, []))
        >>> w.tolist(), sorted(out.keys())
        ([0.0, 0.0], ['grad_norm_0', 'loss_a', 'other'])
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 loss_components: Sequence[str] | None = None, *,
                 clip_grad_norm: bool | None = None, clip_norm: float | None = None) -> None:
        self.optimizer, self.loss_components = optimizer, loss_components
        self.clip_grad_norm, self.clip_norm, self.index = clip_grad_norm, clip_norm, 0
        self._params = [p for g in optimizer.param_groups for p in g["params"]]

    def __call__(self, losses_td: TensorDictBase) -> TensorDictBase:
        names = list(losses_td.keys())  # a TensorDict is not iterable over its keys
        keys = self.loss_components or [k for k in names
                                        if isinstance(k, str) and k.startswith("loss")]
        missing = [k for k in keys if k not in names]
        if missing or not keys:
            raise TrainerError(
                f"OptimizerHook: expected loss entries {list(keys) or 'loss_*'}, received "
                f"keys {sorted(names)}"
            )
        loss = torch.stack([losses_td.get(k) for k in keys]).sum()
        loss.backward()
        norm = clip_gradients(self._params, self.clip_grad_norm is not False, self.clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        out = losses_td.detach()
        out.set(f"grad_norm_{self.index}", torch.tensor(norm))
        return out

    def register(self, trainer: Trainer, name: str = "optimizer") -> None:
        """At ``"optimizer"``; takes the trainer's clip settings where none were given."""
        if self.clip_grad_norm is None:
            self.clip_grad_norm = trainer.clip_grad_norm
        if self.clip_norm is None:
            self.clip_norm = trainer.clip_norm
        self.index = len(trainer.registered_ops("optimizer"))
        trainer.register_op("optimizer", self)
        trainer.register_module(f"{name}_{self.index}" if self.index else name, self.optimizer)


class ReplayBufferTrainer:
    """Extend a replay buffer with each batch (``"batch_process"``), sample the optimiser's
    batches from it (``"process_optim_batch"``) and update priorities (``"post_loss"``).

    Args:
        replay_buffer: an ``rl_replay`` buffer.
        batch_size: the sample size (default: the buffer's).
        memmap: accepted for TorchRL's signature (storages choose their own memory).
        device: where samples go.
        flatten_tensordicts: extend with ``batch.reshape(-1)`` (frames), else the batch
            as it comes (one entry per leading index).
        max_dims: accepted for TorchRL's signature (no padding: batches keep their shape).
        iterate: accepted for TorchRL's signature.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer
        >>> hook = ReplayBufferTrainer(ReplayBuffer(storage=LazyTensorStorage(100)),
        ...                            batch_size=4, flatten_tensordicts=True)
        >>> hook.extend(TensorDict({"x": torch.zeros(2, 5)}, [2, 5]))
        >>> len(hook.replay_buffer), hook.sample(None).batch_size
        (10, torch.Size([4]))
    """

    def __init__(self, replay_buffer: Any, batch_size: int | None = None, memmap: bool = False,
                 device: Any = None, flatten_tensordicts: bool = False,
                 max_dims: Sequence[int] | None = None, iterate: bool = False) -> None:
        self.replay_buffer, self.batch_size, self.device = replay_buffer, batch_size, device
        self.flatten_tensordicts = flatten_tensordicts

    def extend(self, batch: TensorDictBase) -> None:
        self.replay_buffer.extend(batch.reshape(-1) if self.flatten_tensordicts else batch)

    def sample(self, batch: Any) -> TensorDictBase:
        sample = self.replay_buffer.sample(self.batch_size)
        return sample.to(self.device) if self.device is not None else sample

    def update_priority(self, batch: TensorDictBase) -> None:
        update = getattr(self.replay_buffer, "update_tensordict_priority", None)
        if update is not None:
            update(batch)

    def state_dict(self) -> dict[str, Any]:
        return self.replay_buffer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.replay_buffer.load_state_dict(state)

    def register(self, trainer: Trainer, name: str = "replay_buffer") -> None:
        trainer.register_op("batch_process", self.extend)
        trainer.register_op("process_optim_batch", self.sample)
        trainer.register_op("post_loss", self.update_priority)
        trainer.register_module(name, self)


class LogScalar:
    """Log a reduction of ``batch[key]`` (``"pre_steps_log"``): TorchRL's ``LogScalar``.

    Args:
        key: the entry (default ``("next", "reward")``).
        logname: the logged name (default ``"r_training"``).
        log_pbar: accepted for TorchRL's signature.
        include_std: also log ``<logname>_std``.
        reduction: ``"mean"``, ``"sum"``, ``"max"`` or ``"min"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> batch = TensorDict({"next": {"reward": torch.tensor([1.0, 3.0])}}, [2])
        >>> LogScalar()(batch)
        {'r_training': 2.0, 'r_training_std': 1.4142135381698608}
    """

    def __init__(self, key: Any = ("next", "reward"), logname: str = "r_training",
                 log_pbar: bool = False, include_std: bool = True,
                 reduction: str = "mean") -> None:
        if reduction not in ("mean", "sum", "max", "min"):
            raise TrainerError(
                f"LogScalar: reduction must be mean, sum, max or min, received {reduction!r}"
            )
        self.key, self.logname, self.include_std, self.reduction = (key, logname, include_std,
                                                                    reduction)

    def __call__(self, batch: TensorDictBase) -> dict[str, float]:
        value = batch.get(self.key).float()
        out = {self.logname: float(getattr(value, self.reduction)())}
        if self.include_std and value.numel() > 1:
            out[f"{self.logname}_std"] = float(value.std())
        return out

    def register(self, trainer: Trainer, name: str | None = None) -> None:
        trainer.register_op("pre_steps_log", self)


class CountFramesLog:
    """Log the frames collected so far as ``n_frames`` (``"pre_steps_log"``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> count = CountFramesLog(frame_skip=4)
        >>> count(TensorDict({}, [2, 8])), count(TensorDict({}, [2, 8]))
        ({'n_frames': 64}, {'n_frames': 128})
    """

    def __init__(self, frame_skip: int = 1, log_pbar: bool = False) -> None:
        self.frame_skip, self.frame_count = frame_skip, 0

    def __call__(self, batch: TensorDictBase) -> dict[str, int]:
        self.frame_count += batch.numel() * self.frame_skip
        return {"n_frames": self.frame_count}

    def register(self, trainer: Trainer, name: str = "count_frames_log") -> None:
        trainer.register_op("pre_steps_log", self)


class UpdateWeights:
    """``collector.update_policy_weights_()`` every ``update_weights_interval`` batches
    (``"post_steps"``).

    Examples:
        >>> class Collector:
        ...     pushes = 0
        ...     def update_policy_weights_(self): self.pushes += 1
        >>> collector = Collector()
        >>> hook = UpdateWeights(collector, update_weights_interval=2)
        >>> for _ in range(5): hook()
        >>> collector.pushes
        2
    """

    def __init__(self, collector: Any, update_weights_interval: int) -> None:
        if not isinstance(update_weights_interval, int) or update_weights_interval < 1:
            raise TrainerError(
                "UpdateWeights: update_weights_interval must be an int >= 1, received "
                f"{update_weights_interval!r}"
            )
        self.collector, self.update_weights_interval, self.counter = (
            collector, update_weights_interval, 0)

    def __call__(self) -> None:
        self.counter += 1
        if self.counter % self.update_weights_interval == 0:
            self.collector.update_policy_weights_()

    def register(self, trainer: Trainer, name: str = "update_weights") -> None:
        trainer.register_op("post_steps", self)


class LogValidationReward:
    """Every ``record_interval`` batches, roll out ``environment`` for ``record_frames``
    steps under ``exploration_type`` and log the mean reward per step as ``r_evaluation``
    and the summed reward as ``total_r_evaluation`` (``"post_steps_log"``); a
    ``VideoRecorder`` in the env's transforms is dumped after each rollout.

    Args:
        record_interval: batches between two validations.
        record_frames: env steps per validation.
        frame_skip: divides the per-step reward (TorchRL's normalisation).
        policy_exploration: the policy.
        environment: the validation env (``recorder`` is TorchRL's old name).
        exploration_type: TorchRL's ``ExplorationType`` (TorchRL's default RANDOM).
        log_keys: accepted for TorchRL's signature (the reward is logged).
        out_keys: ``{("next", "reward"): name}`` renames ``r_evaluation``.
        suffix: passed to the recorder's ``dump``.
        log_pbar: accepted for TorchRL's signature.
        recorder: TorchRL's old name of ``environment``.

    Raises:
        TrainerError: no environment, or a non-positive interval or frame count.
    """

    def __init__(self, *, record_interval: int, record_frames: int, frame_skip: int = 1,
                 policy_exploration: Any, environment: EnvBase | None = None,
                 exploration_type: Any = ExplorationType.RANDOM, log_keys: Any = None,
                 out_keys: dict | None = None, suffix: str | None = None,
                 log_pbar: bool = False, recorder: EnvBase | None = None) -> None:
        environment = environment if environment is not None else recorder
        if environment is None:
            raise TrainerError("LogValidationReward: expected an environment, received None")
        for name, value in (("record_interval", record_interval),
                            ("record_frames", record_frames)):
            if not isinstance(value, int) or value < 1:
                raise TrainerError(
                    f"LogValidationReward: {name} must be an int >= 1, received {value!r}"
                )
        self.record_interval, self.record_frames, self.frame_skip = (record_interval,
                                                                     record_frames, frame_skip)
        self.policy_exploration, self.environment = policy_exploration, environment
        self.exploration_type, self.suffix, self.count = exploration_type, suffix, 0
        self.name = (out_keys or {}).get(("next", "reward"), "r_evaluation")

    @torch.no_grad()
    def __call__(self, batch: Any = None) -> dict[str, float] | None:
        self.count += 1
        if (self.count - 1) % self.record_interval:
            return None
        with set_exploration_type(self.exploration_type):
            data = self.environment.rollout(self.record_frames, self.policy_exploration,
                                            break_when_any_done=False)
        for t in getattr(getattr(self.environment, "transform", None), "transforms", []):
            if hasattr(t, "dump"):
                t.dump(suffix=self.suffix)
        reward = data.get(("next", "reward")).float()
        return {self.name: float(reward.mean()) / self.frame_skip,
                f"total_{self.name}": float(reward.sum())}

    def register(self, trainer: Trainer, name: str = "recorder") -> None:
        trainer.register_op("post_steps_log", self)
