"""Preemption (issue 26): examples killed at any moment resume and finish their budget once;
SIGTERM writes a checkpoint and exits cleanly; a resumed seeded run equals the original.

Each launch of an example is a process of its own that runs the script as ``__main__`` with
its command line, as ``python examples/X.py ...`` does; a kill lands at a random moment
after the first checkpoint, possibly inside a later checkpoint's write. Every example is
covered, each with a budget of a few seconds of training. The launches are forked from one
interpreter per module that has already imported torch, tensordict and gymnasium (the
``zygote`` fixture, as ``multiprocessing``'s forkserver does): those imports cost ~5 s idle,
~15 s loaded, and these tests launch 19 times; ``python examples/X.py`` from a bare
interpreter is run by ``test_profiling_learner.py`` (every example) and CI's README main job.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    # 4 envs x 32 steps = 128 frames a batch
    "ppo_cartpole.py": ["--num-envs", "4", "--steps-per-env", "32", "--epochs", "1",
                        "--minibatch-size", "64"],
    # 2 workers x 4 envs x 16 steps = 128 frames a batch; learning starts at 256
    "dqn_prioritized.py": ["--learning-starts", "256", "--updates-per-batch", "2",
                           "--buffer-size", "4096"],
    "ppo_lstm_masked_cartpole.py": ["--num-envs", "4", "--steps-per-env", "64", "--epochs", "1",
                                    "--num-minibatches", "2"],
    # Hopper-v5 (MuJoCo, VecNorm statistics in the collector's state): 1 env x 256 steps
    "ppo_mujoco.py": ["--steps-per-env", "256", "--num-minibatches", "4", "--epochs", "1"],
    # 4 envs x 8 steps = 32 frames a batch
    "sac_pendulum.py": ["--num-envs", "4", "--steps-per-env", "8", "--learning-starts", "256",
                        "--updates-per-frame", "0.05"],
    # ALE Breakout, emulator frames: 2 envs x 16 steps x frame skip 4 = 128 a batch
    "ppo_atari.py": ["--num-envs", "2", "--steps-per-env", "16", "--epochs", "1",
                     "--num-minibatches", "2", "--threads", "1"],
    # HalfCheetah-v5 (MuJoCo) through sac_pendulum.py's loop: 4 envs x 8 steps a batch
    "sac_mujoco.py": ["--num-envs", "4", "--steps-per-env", "8", "--learning-starts", "256",
                      "--updates-per-frame", "0.05", "--buffer-size", "4096", "--hidden", "64"],
}  # fmt: skip
TOTAL = 1024
# a third launch of a finished run, for one example of each loop (on-policy with one
# collector, off-policy with several workers and replay, off-policy with one): each launch
# costs the packages' imports and the run's setup (dqn_prioritized.py's: two spawned workers)
RESUME_FINISHED = {"ppo_cartpole.py", "dqn_prioritized.py", "sac_pendulum.py"}
EVERY = 128  # frames between checkpoints: one every batch or so


def _start(zygote, script, ckpt, *extra):
    """``python examples/<script> ...`` in ``ckpt``'s parent, forked from the zygote."""
    argv = ["--total-frames", str(TOTAL), "--seed", "1", "--checkpoint-dir", str(ckpt),
            "--checkpoint-every", str(EVERY), *EXAMPLES[script], *extra]  # fmt: skip
    return zygote.launch(script=ROOT / "examples" / script, argv=argv, cwd=ckpt.parent)


def _saved_frames(ckpt: Path) -> int | None:
    # the newest intact checkpoint, as `--resume` finds it: a kill between a snapshot's
    # rename and the LATEST update leaves LATEST one behind (a race seen under load)
    from rl_collectors import valid_checkpoint

    where = valid_checkpoint(ckpt)[0]
    if where is None:
        return None
    return torch.load(where / "state.pt", weights_only=False)["extra"]["frames"]


def _wait_for_checkpoint(proc, ckpt, at_least=1, timeout=240.0):
    deadline = time.monotonic() + timeout
    while (_saved_frames(ckpt) or 0) < at_least:
        assert proc.poll() is None, proc.stderr()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint written in time"
        time.sleep(0.05)


def _finish(proc, timeout=280):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_sigkill_at_a_random_moment_then_resume_finishes_the_budget_once(
    script, tmp_path, zygote, no_leaks
):
    ckpt = tmp_path / "ckpt"
    proc = _start(zygote, script, ckpt)
    try:
        draw = random.Random(script)
        # after a checkpoint in the first half of the run, then anywhere, a write included
        _wait_for_checkpoint(proc, ckpt, at_least=EVERY * draw.randint(1, TOTAL // EVERY // 2))
        time.sleep(draw.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
        proc.communicate()
    saved = _saved_frames(ckpt)  # what the kill left: the previous one if it hit a write
    assert saved is not None and 0 < saved <= TOTAL
    result = _finish(_start(zygote, script, ckpt, "--resume"))
    # the resumed run collects exactly what the checkpoint had not: no frame twice, none lost
    assert result["resumed_from_frames"] == saved
    assert result["frames"] == TOTAL and _saved_frames(ckpt) == TOTAL
    if script in RESUME_FINISHED:  # a finished run has nothing left to do
        again = _finish(_start(zygote, script, ckpt, "--resume"))
        assert again["frames"] == TOTAL and again["resumed_from_frames"] == TOTAL


@pytest.mark.timeout(600)
# the signal path is shared (Checkpointer's handler, unit-tested with SIGTERM in rl-collectors'
# test_collectors_checkpoint.py); this runs it through the loop with worker processes, and
# ppo_cartpole.py's loop stops on it through submitit's SIGUSR2 below (the same handler)
@pytest.mark.parametrize("script", ["dqn_prioritized.py"])
def test_sigterm_writes_a_checkpoint_within_the_grace_period_and_exits(
    script, tmp_path, zygote, no_leaks
):
    ckpt = tmp_path / "ckpt"
    budget = 8 * TOTAL  # long enough that SIGTERM lands inside the loop on a fast, idle machine
    # only SIGTERM saves
    proc = _start(zygote, script, ckpt, "--checkpoint-every", "0", "--total-frames", str(budget))
    try:
        deadline = time.monotonic() + 240
        while (
            proc.poll() is None
            and not list(tmp_path.glob("ckpt"))
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)  # the Checkpointer made it: the loop starts
        time.sleep(0.3)  # inside the training loop (its handlers are installed)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        result = _finish(proc, timeout=30)  # Slurm's default grace period is 30 s
        elapsed = time.monotonic() - sent
    finally:
        proc.kill()
        proc.communicate()
    assert result["stopped_by_signal"] and elapsed < 30
    # == budget: it was saving its last batch
    assert _saved_frames(ckpt) == result["frames"] <= budget
    rest = _finish(_start(zygote, script, ckpt, "--resume", "--total-frames", str(budget)))
    assert rest["resumed_from_frames"] == result["frames"] and rest["frames"] == budget


class _Resumable:
    """Runs an example's ``main`` in a submitit job; submitit's ``checkpoint`` hook
    resubmits the same call, and ``--resume`` picks up the checkpoint (the pattern of
    docs/checkpointing.md, as a test helper)."""

    def __call__(self, script: str, argv: list[str]) -> dict:
        import importlib.util

        spec = importlib.util.spec_from_file_location("example_under_test", script)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        sys.argv = [script, *argv]
        return module.main(module.parse_args())

    def checkpoint(self, *args, **kwargs):
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)


@pytest.mark.timeout(600)
def test_submitit_local_job_requeues_through_its_checkpoint_hook_and_finishes(tmp_path, no_leaks):
    import cloudpickle
    import submitit

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ckpt = tmp_path / "ckpt"
    total = 16 * TOTAL  # long enough for the signal to land inside the run
    argv = ["--total-frames", str(total), "--seed", "1", "--checkpoint-dir", str(ckpt),
            "--checkpoint-every", "256", *EXAMPLES["ppo_cartpole.py"], "--resume"]  # fmt: skip
    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=8)
    job = executor.submit(_Resumable(), str(ROOT / "examples" / "ppo_cartpole.py"), argv)
    deadline = time.monotonic() + 240
    while _saved_frames(ckpt) is None:
        assert not job.done(), job.stderr()
        assert time.monotonic() < deadline, "no checkpoint written in time"
        time.sleep(0.05)
    import psutil

    # what Slurm's --signal does before a preemption: USR2 to the task (submitit's local
    # controller, the job's own process, only forwards SIGTERM)
    tasks = psutil.Process(job._process.pid).children()
    assert tasks, "the job's task process is gone"
    for task in tasks:
        task.send_signal(signal.SIGUSR2)
    result = job.result()
    assert result["frames"] == total
    assert 0 < result["resumed_from_frames"] < total  # the requeued run resumed
    assert "Requeued job" in (job.stderr() or "") + (job.stdout() or "")
