"""``--logger`` and ``--video`` on the examples, end to end (issue 39): each backend's own
reader finds the scalars the run logged under CleanRL's names, and each evaluation
episode's mp4 decodes back with one frame per step plus the reset frame. (TensorBoard, the
default, is checked by ``test_examples_smoke.py``.)

The example runs are started together, once per module (:func:`runs`): each is one
single-threaded process, so on CI's cores they overlap instead of queueing; they are forked
from one interpreter that imported torch, tensordict and gymnasium once (``zygote``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--total-frames", "1024", "--steps-per-env", "8"]
TIMEOUT = 600  # seconds for all the runs together, on a loaded machine (load 10: 385 s)
# one batch, then a capped evaluation episode: rendering is the cost (MuJoCo renders through
# headless EGL, in software without a GPU)
VIDEO_ARGS = {
    "ppo_mujoco.py": ["--total-frames", "64", "--steps-per-env", "64", "--num-minibatches",
                      "1", "--epochs", "1", "--video-max-steps", "6"],
    "ppo_atari.py": ["--total-frames", "64", "--num-envs", "1", "--steps-per-env", "16",
                     "--num-minibatches", "1", "--epochs", "1", "--threads", "1",
                     "--video-max-steps", "12"],
}
RUNS = {  # name -> (script, arguments); each runs in its own folder
    "csv": ("ppo_cartpole.py", [*ARGS, "--logger", "csv", "--logdir", "runs/ppo", "--video"]),
    "wandb": ("ppo_cartpole.py", [*ARGS, "--logger", "wandb", "--logdir", "runs/wb"]),
    "mlflow": ("ppo_cartpole.py", [*ARGS, "--logger", "mlflow", "--logdir", "runs/mlflow-ppo"]),
    **{script: (script, [*args, "--logger", "csv", "--logdir", "runs/v", "--video"])
       for script, args in VIDEO_ARGS.items()},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, zygote) -> dict[str, tuple[Path, dict]]:
    """Every run of :data:`RUNS`, started at once: ``name -> (its folder, its JSON line)``.
    Each is ``python examples/<script> ...`` forked from the ``zygote`` fixture's
    interpreter (torch, tensordict and gymnasium imported once for all five)."""
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    started = {}
    try:
        for name, (script, args) in RUNS.items():
            cwd = tmp_path_factory.mktemp(name.replace(".", "_"))
            started[name] = (cwd, zygote.launch(script=ROOT / "examples" / script, argv=args,
                                                cwd=cwd, env=env))  # fmt: skip
        done = {}
        for name, (cwd, proc) in started.items():
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, f"{name}: {err[-3000:]}"
            done[name] = (cwd, json.loads(out.strip().splitlines()[-1]))
        return done
    finally:
        for _, proc in started.values():
            proc.kill()


@pytest.mark.timeout(TIMEOUT + 180)
def test_csv_logger_and_video(runs) -> None:
    from rl_record import read_video

    cwd, result = runs["csv"]
    root = cwd / "runs/ppo"
    with open(root / "scalars/charts/SPS.csv") as f:
        steps = [int(row[0]) for row in csv.reader(f)]
    assert steps == list(range(128, 1025, 128))  # every batch, at its frame count
    assert (root / "scalars/losses/loss_critic.csv").exists()
    assert json.loads((root / "hparams.json").read_text())["total_frames"] == 1024
    (video,) = root.glob("videos/eval/video_*.mp4")
    frames = read_video(video)
    assert frames.shape == (int(result["video_return"]) + 1, 400, 600, 3)


@pytest.mark.timeout(TIMEOUT + 180)
def test_wandb_offline_and_mlflow_hold_the_scalars(runs) -> None:
    from mlflow import MlflowClient
    from rl_record import read_wandb_history

    cwd, _ = runs["wandb"]
    (run_dir,) = (cwd / "runs/wandb").glob("offline-run-*")
    rows = read_wandb_history(run_dir)
    sps = [r["trainer/step"] for r in rows if "charts/SPS" in r]
    assert sps == list(range(128, 1025, 128))

    cwd, _ = runs["mlflow"]
    client = MlflowClient(tracking_uri=f"sqlite:///{cwd / 'runs/mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("mlflow-ppo").experiment_id])
    history = client.get_metric_history(run.info.run_id, "charts/SPS")
    assert sorted(m.step for m in history) == list(range(128, 1025, 128))
    assert run.data.params["total_frames"] == "1024"


@pytest.mark.timeout(TIMEOUT + 180)
@pytest.mark.parametrize(("script", "size"), [("ppo_atari.py", (210, 160)),
                                              ("ppo_mujoco.py", (480, 480))])
def test_video_of_mujoco_and_atari_decodes(runs, script: str, size: tuple[int, int]) -> None:
    """``--video``: MuJoCo's offscreen render (``MUJOCO_GL``, EGL unless set) and ALE's own
    RGB screen, one frame per step plus the reset frame, with the scene's content."""
    from rl_record import read_video

    cwd, result = runs[script]
    (video,) = (cwd / "runs/v").glob("videos/eval/video_*.mp4")
    frames = read_video(video)
    assert result["video_length"] >= 1
    assert frames.shape == (result["video_length"] + 1, *size, 3)
    assert frames.dtype.name == "uint8" and frames.std() > 10  # a rendered scene, not blank
