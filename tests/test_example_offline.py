"""``examples/iql_offline.py`` with each ``--loss`` on a tiny dataset it records itself (its
IQL run is the smoke and profiling tests'); the figures come back and the dataset's
behaviour return is read from the dataset's metadata."""

from __future__ import annotations

import math
import runpy
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.timeout(300)
def test_every_loss_trains_from_a_recorded_dataset(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.syspath_prepend(str(EXAMPLES))  # it imports sac_pendulum, as a script does
    threads = torch.get_num_threads()
    results = {}
    try:
        for loss in ("cql", "td3bc", "bc"):
            monkeypatch.setattr(sys, "argv", [
                "iql_offline.py", "--env-id", "Pendulum-v1", "--dataset-id", "test/p-v0",
                "--record-frames", "400", "--minari-root", "minari", "--copies-root", "copies",
                "--total-frames", "20", "--eval-every", "10", "--eval-episodes", "1",
                "--hidden", "32", "--batch-size", "32", "--loss", loss,
                *(["--logger", "csv", "--logdir", "runs", "--video"] if loss == "bc" else []),
                *(["--bc-steps", "10", "--actor-lr", "1e-4"] if loss == "cql" else [])])
            ns = runpy.run_path(str(EXAMPLES / "iql_offline.py"), run_name="example_under_test")
            results[loss] = ns["main"](ns["parse_args"](ns["Config"], ns["__doc__"]))
    finally:
        torch.set_num_threads(threads)
    for loss, result in results.items():
        assert result["loss"] == loss and result["frames"] == 20, result
        assert result["dataset_transitions"] == 400, result
        assert [s for s, _ in result["evaluations"]] == [10, 20], result
        assert all(math.isfinite(r) and r < 0 for _, r in result["evaluations"]), result
    assert all(r["compile_seconds"] == 0.0 for r in results.values())  # eager update step
    assert result["behaviour_return"] is None  # a random-policy set stores none
    from rl_record import read_video

    (video,) = (tmp_path / "runs").rglob("video_*.mp4")  # --video: one deterministic episode
    frames = read_video(video)
    # Pendulum's episodes end at 200 steps: one frame per step plus the reset frame
    assert frames.shape == (201, 500, 500, 3) and frames.std() > 10, frames.shape
    assert len(list((tmp_path / "minari").rglob("main_data.hdf5"))) == 1  # recorded once


@pytest.mark.timeout(300)
def test_iql_scales_rewards_by_the_spread_of_the_episode_returns(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    threads = torch.get_num_threads()

    def run(*extra: str) -> dict:
        monkeypatch.setattr(sys, "argv", [
            "iql_offline.py", "--env-id", "Pendulum-v1", "--dataset-id", "test/s-v0",
            "--record-frames", "600", "--minari-root", "minari", "--copies-root", "copies",
            "--total-frames", "2", "--eval-every", "2", "--eval-episodes", "1",
            "--hidden", "16", "--batch-size", "8", *extra])
        ns = runpy.run_path(str(EXAMPLES / "iql_offline.py"), run_name="example_under_test")
        return ns["main"](ns["parse_args"](ns["Config"], ns["__doc__"]))

    try:
        auto = run("--loss", "iql")
        other = run("--loss", "td3bc")
        given = run("--loss", "td3bc", "--reward-scale", "0.5")
        with pytest.raises(ValueError, match=r"--reward-scale: expected 'auto' or a positive "
                                             r"number, got '-1'"):
            run("--loss", "iql", "--reward-scale", "-1")
    finally:
        torch.set_num_threads(threads)
    import minari

    # the dataset's own episodes, read through Minari (3 of Pendulum's 200-step episodes)
    returns = [float(ep.rewards.sum()) for ep in minari.load_dataset("test/s-v0")]
    assert len(returns) == 3 and max(returns) > min(returns)
    assert auto["reward_scale"] == pytest.approx(1000.0 / (max(returns) - min(returns)),
                                                 rel=1e-5)
    assert other["reward_scale"] == 1.0 and given["reward_scale"] == 0.5


def test_actor_learning_rate_schedule_and_groups(monkeypatch) -> None:
    """The actor's Adam group holds the actor's parameters alone; CQL's warm start trains it
    at ``--lr``, the steps after at ``--actor-lr``; IQL's ``auto`` decay is the cosine to 0."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    ns = runpy.run_path(str(EXAMPLES / "iql_offline.py"), run_name="example_under_test")
    config, lr_at = ns["Config"], ns["actor_lr_at"]
    cql = config(loss="cql", lr=3e-4, actor_lr=3e-5, bc_steps=10, total_frames=100)
    assert [lr_at(cql, s) for s in (0, 9, 10, 99)] == [3e-4, 3e-4, 3e-5, 3e-5]
    iql = config(loss="iql", lr=3e-4, total_frames=100)
    assert lr_at(iql, 0) == pytest.approx(3e-4) and lr_at(iql, 50) == pytest.approx(1.5e-4)
    assert lr_at(iql, 100) == pytest.approx(0.0, abs=1e-12)
    flat = config(loss="iql", lr=3e-4, actor_lr_decay="none", total_frames=100)
    assert lr_at(flat, 50) == 3e-4
    assert lr_at(config(loss="td3bc", lr=1e-3), 7) == 1e-3  # auto: no decay but IQL's

    from sac_pendulum import make_env

    env = make_env(config(env_id="Pendulum-v1"))
    try:
        cfg = config(env_id="Pendulum-v1", loss="cql", hidden=8, lr=3e-4, actor_lr=3e-5,
                     bc_steps=10)
        loss_fn, actor, _ = ns["make_loss"](cfg, env)
        critics, actor_group = ns["make_optimizer"](cfg, loss_fn, actor).param_groups
        ptrs = {p.data_ptr() for p in actor.parameters()}
        assert {p.data_ptr() for p in actor_group["params"]} == ptrs
        assert not ptrs & {p.data_ptr() for p in critics["params"]}
        assert critics["lr"] == 3e-4 and actor_group["lr"] == 3e-4  # the warm start's
        with pytest.raises(ValueError, match=r"--actor-lr-decay: expected one of"):
            ns["make_optimizer"](config(actor_lr_decay="linear"), loss_fn, actor)
    finally:
        env.close()
