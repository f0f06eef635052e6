"""``ppo_mujoco.py --compile auto`` (its default): the update step compiles only in a run
long enough to pay compiling back; ``true`` / ``false`` force it; a bad value is refused."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ppo_mujoco.py"


@pytest.fixture(scope="module")
def ppo():
    return runpy.run_path(str(EXAMPLE), run_name="example_under_test")


def _steps(cfg) -> int:  # the example's count: batches x epochs x minibatches
    per_batch = cfg.num_envs * cfg.steps_per_env
    return -(-cfg.total_frames // per_batch) * cfg.epochs * cfg.num_minibatches


def test_auto_compiles_the_default_run_and_not_a_short_one(ppo) -> None:
    config, use, least = ppo["Config"], ppo["use_compile"], ppo["AUTO_COMPILE_UPDATES"]
    default = config()
    assert default.compile == "auto" and _steps(default) >= least
    assert use(default, _steps(default)) is True
    short = config(total_frames=20_480)  # 10 batches: 3,200 update steps
    assert _steps(short) < least and use(short, _steps(short)) is False
    assert use(config(compile="auto"), least - 1) is False and use(config(), least) is True
    for forced, expected in (("true", True), (True, True), ("false", False), (False, False)):
        assert use(config(compile=forced), 1) is expected
        assert use(config(compile=forced), 10 * least) is expected


@pytest.mark.parametrize(("argv", "expected"), [
    ([], "auto"), (["--compile"], "true"), (["--compile", "false"], "false"),
    (["--compile", "AUTO"], "auto"), (["--compile", "1"], "1"),
])
def test_the_compile_flag_parses(ppo, monkeypatch, argv, expected) -> None:
    monkeypatch.setattr(sys, "argv", ["ppo_mujoco.py", *argv])
    assert ppo["parse_args"]().compile == expected


def test_a_bad_compile_value_names_the_flag(ppo, monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["ppo_mujoco.py", "--compile", "maybe"])
    with pytest.raises(SystemExit):
        ppo["parse_args"]()
    assert "--compile expects true, false or auto, received 'maybe'" in capsys.readouterr().err
    with pytest.raises(Exception, match="--compile expects true, false or auto"):
        ppo["use_compile"](ppo["Config"](compile="sometimes"), 1)
