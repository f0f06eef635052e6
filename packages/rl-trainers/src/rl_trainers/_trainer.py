"""``Trainer``: TorchRL's nested loop (collect, then optimise) with its ten hook points.

One pass of :meth:`Trainer.train` (the hook names are TorchRL's)::

    for batch in collector:
        batch = batch_process(batch)            # "batch_process"
        pre_steps_log(batch)                    # "pre_steps_log"
        pre_optim_steps()                       # "pre_optim_steps"
        for j in range(optim_steps_per_batch):
            sub_batch = process_optim_batch(batch)   # "process_optim_batch"
            losses = loss_module(sub_batch)
            post_loss(sub_batch)                # "post_loss"
            losses = optimizer(losses)          # "optimizer" (backward, clip, step)
            post_optim()                        # "post_optim"
            post_optim_log(sub_batch)           # "post_optim_log"
        post_steps()                            # "post_steps"
        post_steps_log(batch)                   # "post_steps_log"
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import torch
from rl_collectors import Checkpointer
from rl_record import Logger
from tensordict import TensorDictBase
from torch import nn

from rl_trainers.exceptions import TrainerError

__all__ = ["HOOK_POINTS", "Trainer"]

HOOK_POINTS = (
    "batch_process", "pre_optim_steps", "process_optim_batch", "post_loss", "optimizer",
    "post_steps", "post_optim", "pre_steps_log", "post_steps_log", "post_optim_log",
)
_LOG_POINTS = ("pre_steps_log", "post_steps_log", "post_optim_log")
_DATA_POINTS = ("batch_process", "process_optim_batch", "post_loss", "optimizer")


class Trainer:
    """TorchRL's generic Trainer: a collector, a loss module, an optimizer and hooks.

    Hooks are registered with :meth:`register_op` at one of :data:`HOOK_POINTS`. Data
    hooks (``batch_process``, ``process_optim_batch``, ``post_loss``, ``optimizer``) take
    a TensorDict and may return a new one; log hooks return a dict of scalars (or None),
    logged with ``logger.log_scalar(name, value, step=collected_frames)`` once per
    ``log_interval`` frames and name; the others take nothing. Checkpoints go through
    ``rl_collectors.Checkpointer`` (``save_trainer_file`` is its directory; the loss
    module, optimizer, collector and every registered module with a ``state_dict``).

    Args:
        collector: an iterable of batches (a ``Collector``).
        total_frames: stop after this many frames.
        frame_skip: frames per env step (frame counts are multiplied by it).
        optim_steps_per_batch: optimisation steps per collected batch.
        loss_module: ``sub_batch -> TensorDict`` of ``loss_*`` entries.
        optimizer: when given, an :class:`OptimizerHook` is registered for it.
        logger: an ``rl_record`` logger, or None.
        clip_grad_norm: clip the total gradient norm (else each value) at ``clip_norm``.
        clip_norm: the clip threshold; None: no clipping.
        progress_bar: show a tqdm bar (the ``[progress]`` extra).
        seed: ``torch.manual_seed(seed)`` at construction.
        save_trainer_interval: frames between checkpoints.
        log_interval: frames between two logs of the same name.
        save_trainer_file: the checkpoint directory (None: no checkpoints).

    Raises:
        TrainerError: a non-positive ``total_frames`` / ``optim_steps_per_batch``, or a
            logger that is not an ``rl_record.Logger``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> net = torch.nn.Linear(3, 1)
        >>> loss = lambda td: TensorDict({"loss": net(td["x"]).pow(2).mean()}, [])
        >>> batches = [TensorDict({"x": torch.randn(8, 3)}, [8]) for _ in range(4)]
        >>> trainer = Trainer(collector=batches, total_frames=32, optim_steps_per_batch=2,
        ...                   loss_module=loss, optimizer=torch.optim.SGD(net.parameters(), 0.1))
        >>> seen = []
        >>> trainer.register_op("post_steps", lambda: seen.append(trainer.collected_frames))
        >>> trainer.train()
        >>> seen, trainer.optim_count
        ([8, 16, 24, 32], 8)
    """

    def __init__(self, *, collector: Iterable[TensorDictBase], total_frames: int,
                 frame_skip: int = 1, optim_steps_per_batch: int, loss_module: Callable,
                 optimizer: torch.optim.Optimizer | None = None, logger: Logger | None = None,
                 clip_grad_norm: bool = True, clip_norm: float | None = None,
                 progress_bar: bool = False, seed: int | None = None,
                 save_trainer_interval: int = 10_000, log_interval: int = 10_000,
                 save_trainer_file: str | os.PathLike | None = None) -> None:
        for name, value in (("total_frames", total_frames), ("frame_skip", frame_skip),
                            ("optim_steps_per_batch", optim_steps_per_batch)):
            if not isinstance(value, int) or value < 1:
                raise TrainerError(f"Trainer: {name} must be an int >= 1, received {value!r}")
        if logger is not None and not isinstance(logger, Logger):
            raise TrainerError(
                f"Trainer: logger must be an rl_record Logger or None, received "
                f"{type(logger).__name__}"
            )
        if seed is not None:
            torch.manual_seed(seed)
        self.collector, self.total_frames, self.frame_skip = collector, total_frames, frame_skip
        self.optim_steps_per_batch, self.loss_module = optim_steps_per_batch, loss_module
        self.optimizer, self.logger, self.progress_bar = optimizer, logger, progress_bar
        self.clip_grad_norm, self.clip_norm = clip_grad_norm, clip_norm
        self.save_trainer_interval, self.log_interval = save_trainer_interval, log_interval
        self.save_trainer_file = save_trainer_file
        self.collected_frames = self.optim_count = 0
        self._ops: dict[str, list[tuple[Callable, dict]]] = {p: [] for p in HOOK_POINTS}
        self._modules: dict[str, Any] = {}
        self._last_log: dict[str, int] = {}
        self._checkpointer: Checkpointer | None = None
        if optimizer is not None:
            from rl_trainers._hooks import OptimizerHook

            OptimizerHook(optimizer).register(self)

    # -- registration ------------------------------------------------------------------
    def register_op(self, dest: str, op: Callable, **kwargs: Any) -> None:
        """Call ``op(..., **kwargs)`` at hook point ``dest`` (one of :data:`HOOK_POINTS`).

        Raises:
            TrainerError: an unknown ``dest`` or a non-callable ``op``.
        """
        if dest not in self._ops:
            raise TrainerError(
                f"Trainer.register_op: dest must be one of {HOOK_POINTS}, received {dest!r}"
            )
        if not callable(op):
            raise TrainerError(f"Trainer.register_op: op must be callable, received {op!r}")
        self._ops[dest].append((op, kwargs))

    def registered_ops(self, dest: str) -> list[Callable]:
        """The ops registered at ``dest``, in call order."""
        return [op for op, _ in self._ops[dest]]

    def register_module(self, module_name: str, module: Any) -> None:
        """Save ``module`` in the trainer's checkpoints under ``module_name``.

        Raises:
            TrainerError: the name is taken.
        """
        if module_name in self._modules:
            raise TrainerError(
                f"Trainer.register_module: module_name {module_name!r} is already registered"
            )
        self._modules[module_name] = module

    # -- the loop ----------------------------------------------------------------------
    def _data_hook(self, dest: str, batch: Any) -> Any:
        for op, kwargs in self._ops[dest]:
            out = op(batch, **kwargs)
            if isinstance(out, TensorDictBase):
                batch = out
        return batch

    def _plain_hook(self, dest: str) -> None:
        for op, kwargs in self._ops[dest]:
            op(**kwargs)

    def _log_hook(self, dest: str, batch: Any) -> None:
        for op, kwargs in self._ops[dest]:
            self._log(**(op(batch, **kwargs) or {}))

    def _log(self, log_pbar: bool = False, **values: Any) -> None:
        """Log each value whose name was not logged in the last ``log_interval`` frames."""
        if self.logger is None:
            return
        for name, value in values.items():
            last = self._last_log.get(name)
            if last is None or self.collected_frames - last >= self.log_interval:
                self._last_log[name] = self.collected_frames
                self.logger.log_scalar(name, value, step=self.collected_frames)

    def optim_steps(self, batch: TensorDictBase) -> dict[str, float]:
        """The inner loop on one batch; returns the mean of each loss over the steps."""
        self._plain_hook("pre_optim_steps")
        sums: dict[str, float] = {}
        for _ in range(self.optim_steps_per_batch):
            self.optim_count += 1
            sub_batch = self._data_hook("process_optim_batch", batch)
            losses = self.loss_module(sub_batch)
            self._data_hook("post_loss", sub_batch)
            losses = self._data_hook("optimizer", losses)
            self._plain_hook("post_optim")
            self._log_hook("post_optim_log", sub_batch)
            for key, value in losses.items():
                if isinstance(key, str) and key.startswith("loss"):
                    sums[key] = sums.get(key, 0.0) + float(value.detach())
        return {k: v / self.optim_steps_per_batch for k, v in sums.items()}

    def train(self) -> None:
        """Collect and optimise until ``total_frames`` (or a checkpoint signal)."""
        bar = None
        if self.progress_bar:
            from tqdm import tqdm

            bar = tqdm(total=self.total_frames, unit="frame")
        try:
            for batch in self.collector:
                if self._step(batch, bar):
                    break
        finally:
            if bar is not None:
                bar.close()
            if hasattr(self.collector, "shutdown"):
                self.collector.shutdown()
            if self._checkpointer is not None:
                self._checkpointer.close()

    def _step(self, batch: TensorDictBase, bar: Any) -> bool:
        batch = self._data_hook("batch_process", batch)
        frames = batch.numel() * self.frame_skip
        self.collected_frames += frames
        self._log_hook("pre_steps_log", batch)
        losses = self.optim_steps(batch)
        self._plain_hook("post_steps")
        self._log_hook("post_steps_log", batch)
        self._log(**losses)
        if bar is not None:
            bar.update(frames)
        done = self.collected_frames >= self.total_frames
        return self.save_trainer(force_save=done) or done

    # -- checkpoints -------------------------------------------------------------------
    def _components(self) -> dict[str, Any]:
        found = {"loss_module": self.loss_module, "collector": self.collector,
                 **self._modules}
        return {k: v for k, v in found.items()
                if hasattr(v, "state_dict") and hasattr(v, "load_state_dict")
                or hasattr(v, "dumps")}

    def _get_checkpointer(self) -> Checkpointer | None:
        if self._checkpointer is None and self.save_trainer_file:
            self._checkpointer = Checkpointer(
                self.save_trainer_file, every_frames=self.save_trainer_interval,
                **self._components(),
            )
        return self._checkpointer

    def save_trainer(self, force_save: bool = False) -> bool:
        """Checkpoint when due (or ``force_save``); True when a signal asked to stop."""
        ckpt = self._get_checkpointer()
        if ckpt is None:
            return False
        extra = {"optim_count": self.optim_count}
        return ckpt.step(self.collected_frames, extra, final=force_save)

    def load_from_file(self, file: str | os.PathLike) -> bool:
        """Restore the newest checkpoint of directory ``file``; False when there is none."""
        self.save_trainer_file = file
        extra = self._get_checkpointer().restore()  # type: ignore[union-attr]
        if extra is None:
            return False
        self.collected_frames, self.optim_count = int(extra["frames"]), extra["optim_count"]
        return True

    def __repr__(self) -> str:
        hooks = {p: len(ops) for p, ops in self._ops.items() if ops}
        return f"Trainer(total_frames={self.total_frames}, hooks={hooks})"


def clip_gradients(params: Iterable[nn.Parameter], clip_grad_norm: bool,
                   clip_norm: float | None) -> float:
    """Clip in place; returns the total norm before clipping (nan when not clipped)."""
    params = [p for p in params if p.grad is not None]
    if clip_norm is None or not params:
        return float("nan")
    if clip_grad_norm:
        return float(nn.utils.clip_grad_norm_(params, clip_norm))
    nn.utils.clip_grad_value_(params, clip_norm)
    return float("nan")
