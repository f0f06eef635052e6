"""``--logger`` and ``--video`` on the main example, end to end (issue 39): each backend's
own reader finds the scalars the run logged under CleanRL's names, and the evaluation
episode's mp4 decodes back with one frame per step plus the reset frame. (TensorBoard,
the default, is checked by ``test_examples_smoke.py``.)"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--total-frames", "1024", "--steps-per-env", "8"]


def _run(tmp_path: Path, *args: str, script: str = "ppo_cartpole.py",
         base: list[str] = ARGS) -> dict:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), *base, *args],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_csv_logger_and_video(tmp_path: Path) -> None:
    from rl_record import read_video

    result = _run(tmp_path, "--logger", "csv", "--logdir", "runs/ppo", "--video")
    root = tmp_path / "runs/ppo"
    with open(root / "scalars/charts/SPS.csv") as f:
        steps = [int(row[0]) for row in csv.reader(f)]
    assert steps == list(range(128, 1025, 128))  # every batch, at its frame count
    assert (root / "scalars/losses/loss_critic.csv").exists()
    assert json.loads((root / "hparams.json").read_text())["total_frames"] == 1024
    (video,) = root.glob("videos/eval/video_*.mp4")
    frames = read_video(video)
    assert frames.shape == (int(result["video_return"]) + 1, 400, 600, 3)


@pytest.mark.timeout(300)
def test_wandb_offline_and_mlflow_hold_the_scalars(tmp_path: Path) -> None:
    from mlflow import MlflowClient
    from rl_record import read_wandb_history

    _run(tmp_path, "--logger", "wandb", "--logdir", "runs/wb")
    (run_dir,) = (tmp_path / "runs/wandb").glob("offline-run-*")
    rows = read_wandb_history(run_dir)
    sps = [r["trainer/step"] for r in rows if "charts/SPS" in r]
    assert sps == list(range(128, 1025, 128))

    _run(tmp_path, "--logger", "mlflow", "--logdir", "runs/mlflow-ppo")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs/mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("mlflow-ppo").experiment_id])
    history = client.get_metric_history(run.info.run_id, "charts/SPS")
    assert sorted(m.step for m in history) == list(range(128, 1025, 128))
    assert run.data.params["total_frames"] == "1024"


# one batch, then a capped evaluation episode: rendering is the cost (MuJoCo renders through
# headless EGL, in software without a GPU)
VIDEO_RUNS = {
    "ppo_mujoco.py": (["--total-frames", "64", "--steps-per-env", "64", "--num-minibatches",
                       "1", "--epochs", "1", "--video-max-steps", "6"], (480, 480)),
    "ppo_atari.py": (["--total-frames", "64", "--num-envs", "1", "--steps-per-env", "16",
                      "--num-minibatches", "1", "--epochs", "1", "--threads", "1",
                      "--video-max-steps", "12"], (210, 160)),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(VIDEO_RUNS))
def test_video_of_mujoco_and_atari_decodes(tmp_path: Path, script: str) -> None:
    """``--video``: MuJoCo's offscreen render (``MUJOCO_GL``, EGL unless set) and ALE's own
    RGB screen, one frame per step plus the reset frame, with the scene's content."""
    from rl_record import read_video

    args, (height, width) = VIDEO_RUNS[script]
    result = _run(tmp_path, "--logger", "csv", "--logdir", "runs/v", "--video",
                  script=script, base=args)
    (video,) = (tmp_path / "runs/v").glob("videos/eval/video_*.mp4")
    frames = read_video(video)
    assert result["video_length"] >= 1
    assert frames.shape == (result["video_length"] + 1, height, width, 3)
    assert frames.dtype.name == "uint8" and frames.std() > 10  # a rendered scene, not blank
