"""Each logger's scalars, hyper-parameters, histograms and videos, read back with the
backend's own reader (csv, TensorBoard's EventAccumulator, W&B's run file, MlflowClient);
bad input raises before anything is written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_record import (
    LOGGER_TYPES,
    CSVLogger,
    LoggerInputError,
    MissingBackendError,
    TensorboardLogger,
    VideoFormatError,
    generate_exp_name,
    get_logger,
    read_video,
    read_wandb_history,
)

VIDEO = torch.randint(0, 255, (6, 3, 32, 40), dtype=torch.uint8)  # [T, C, H, W]


def _log_all(logger) -> None:
    for step, value in ((10, 1.5), (20, torch.tensor(2.5)), (30, np.float32(3.5))):
        logger.log_scalar("charts/episodic_return", value, step=step)
    logger.log_scalar("losses/loss_critic", torch.tensor([0.25]), step=10)
    logger.log_hparams({"lr": 3e-4, "env": {"id": "CartPole-v1"}})
    logger.log_histogram("actions", torch.arange(100.0), step=10, bins=4)


def test_csv_logger_writes_torchrl_layout(tmp_path: Path) -> None:
    with CSVLogger("exp", log_dir=tmp_path, video_format="mp4") as logger:
        _log_all(logger)
        logger.log_video("eval/video", VIDEO.unsqueeze(0), step=7, fps=10)
    root = tmp_path / "exp"
    with open(root / "scalars/charts/episodic_return.csv") as f:
        rows = [(int(s), float(v)) for s, v in csv.reader(f)]
    assert rows == [(10, 1.5), (20, 2.5), (30, 3.5)]
    assert (root / "scalars/losses/loss_critic.csv").read_text() == "10,0.25\n"
    assert json.loads((root / "hparams.json").read_text()) == {"lr": 3e-4,
                                                               "env.id": "CartPole-v1"}
    with open(root / "histograms/actions.csv") as f:
        step, edges, counts = next(csv.reader(f))
    assert step == "10" and [float(c) for c in counts.split()] == [25, 25, 25, 25]
    frames = read_video(root / "videos/eval/video_7.mp4")
    assert frames.shape == (6, 32, 40, 3)


def test_tensorboard_logger_events(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with TensorboardLogger("exp", log_dir=tmp_path) as logger:
        _log_all(logger)
        logger.log_video("eval/video", VIDEO, step=3)
    events = EventAccumulator(str(tmp_path / "exp"), size_guidance={"images": 0})
    events.Reload()
    scalars = [(e.step, e.value) for e in events.Scalars("charts/episodic_return")]
    assert scalars == [(10, 1.5), (20, 2.5), (30, 3.5)]
    assert events.Histograms("actions")[0].histogram_value.num == 100
    image = events.Images("eval/video")[0]
    assert (image.step, image.width, image.height) == (3, 40, 32)
    assert image.encoded_image_string[:6] == b"GIF89a"


def test_wandb_logger_offline_run_dir(tmp_path: Path, monkeypatch) -> None:
    from rl_record import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    with WandbLogger("exp", offline=True, save_dir=tmp_path, project="tests") as logger:
        _log_all(logger)
        logger.log_video("eval/video", VIDEO, step=3)
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    rows = read_wandb_history(run_file.parent)
    returns = [(r["trainer/step"], r["charts/episodic_return"]) for r in rows
               if "charts/episodic_return" in r]
    assert returns == [(10, 1.5), (20, 2.5), (30, 3.5)]
    video = next(r["eval/video"] for r in rows if "eval/video" in r)
    assert video["_type"] == "video-file" and video["path"].endswith(".mp4")
    (mp4,) = run_file.parent.glob(f"files/{video['path']}")
    assert read_video(mp4).shape == (6, 32, 40, 3)


def test_mlflow_logger_local_store(tmp_path: Path) -> None:
    from rl_record import MLFlowLogger

    logger = MLFlowLogger("exp", tmp_path / "mlruns")
    with logger:
        _log_all(logger)
        logger.log_video("eval/video", VIDEO, step=3)
    client, run = logger.client, logger.client.get_run(logger.run_id)
    history = client.get_metric_history(logger.run_id, "charts/episodic_return")
    assert sorted((m.step, m.value) for m in history) == [(10, 1.5), (20, 2.5), (30, 3.5)]
    assert run.data.params == {"lr": "0.0003", "env.id": "CartPole-v1"}
    assert run.info.status == "FINISHED"
    (video,) = (tmp_path / "mlruns/artifacts").glob("*/artifacts/videos/eval_video_3.mp4")
    assert read_video(video).shape == (6, 32, 40, 3)


@pytest.mark.parametrize("value", [torch.ones(3), np.zeros((2, 2)), "1.0", None])
def test_non_scalar_is_refused_and_nothing_written(tmp_path: Path, value) -> None:
    with (CSVLogger("exp", log_dir=tmp_path) as logger,
          pytest.raises(LoggerInputError, match="value must be a number")):
        logger.log_scalar("charts/x", value, step=1)
    assert not (tmp_path / "exp/scalars").exists()


@pytest.mark.parametrize(
    ("video", "match"),
    [
        (torch.zeros(4, 8, 8, 3, dtype=torch.uint8), r"received shape \(4, 8, 8, 3\).*permute"),
        (torch.zeros(4, 3, 8, 8), "must be uint8"),
        (torch.zeros(3, 8, 8, dtype=torch.uint8), "received shape"),
        ([[0]], "must be a tensor"),
    ],
)
def test_bad_video_is_refused_and_nothing_written(tmp_path: Path, video, match) -> None:
    with (CSVLogger("exp", log_dir=tmp_path, video_format="mp4") as logger,
          pytest.raises(VideoFormatError, match=match)):
        logger.log_video("eval", video)
    assert not (tmp_path / "exp/videos").exists()


def test_missing_backend_names_the_extra(monkeypatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(MissingBackendError, match=r"rl-record\[wandb\]"):
        get_logger("wandb", tmp_path, "exp")


def test_get_logger_types_and_bad_type(tmp_path: Path) -> None:
    assert LOGGER_TYPES == ("csv", "tensorboard", "wandb", "mlflow")
    with get_logger("tensorboard", tmp_path, "run") as logger:
        assert isinstance(logger, TensorboardLogger)
    assert any((tmp_path / "run").glob("events.out.tfevents.*"))
    with pytest.raises(LoggerInputError, match="logger_type must be one of"):
        get_logger("neptune", tmp_path, "run")
    assert generate_exp_name("a", "b") != generate_exp_name("a", "b")
    with pytest.raises(LoggerInputError, match="run-\\*.wandb"):
        read_wandb_history(tmp_path)


def test_log_metrics_logs_each_scalar_at_one_step(tmp_path: Path) -> None:
    # TorchRL's sota scripts log a dict of metrics (tensors among them) per iteration
    from tensordict import TensorDict

    with CSVLogger("exp", log_dir=tmp_path) as logger:
        out = logger.log_metrics({"train/q_loss": torch.tensor(0.5), "time/speed": 12.0,
                                  "time/rate": None}, 100)  # None: no measurement yet
        assert out == {"train/q_loss": 0.5, "time/speed": 12.0}
        logger.log_metrics(TensorDict({"eval": {"reward": torch.tensor(-3.0)}}), step=200)
    root = tmp_path / "exp" / "scalars"
    assert (root / "train/q_loss.csv").read_text() == "100,0.5\n"
    assert (root / "time/speed.csv").read_text() == "100,12.0\n"
    assert (root / "eval/reward.csv").read_text() == "200,-3.0\n"
    assert not (root / "time/rate.csv").exists()


def test_csv_rows_logged_just_before_exit_without_close_are_written(tmp_path: Path) -> None:
    # TorchRL's sota scripts never close their logger; the last rows (inside flush_secs)
    # were lost at exit
    import subprocess
    import sys

    code = ("import sys; from rl_record import CSVLogger; "
            "CSVLogger('exp', log_dir=sys.argv[1]).log_metrics({'eval/reward': -1.5}, 7)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
    assert (tmp_path / "exp/scalars/eval/reward.csv").read_text() == "7,-1.5\n"
