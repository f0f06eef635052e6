"""The rl-migrate command: --check, --write, exit codes and bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rl_migrate import main

GOOD = "from torchrl.envs import GymEnv\n\nenv = GymEnv('CartPole-v1')\n"
GAP = "from torchrl.envs import DMControlEnv\n"


def test_check_prints_the_diff_and_writes_nothing(tmp_path: Path, capsys) -> None:
    script = tmp_path / "a.py"
    script.write_text(GOOD)
    assert main(["--check", str(script)]) == 0
    out = capsys.readouterr().out
    assert "-from torchrl.envs import GymEnv\n+from rl_envs import GymEnv\n" in out
    assert script.read_text() == GOOD


def test_check_exits_1_and_names_each_gap(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.py").write_text(GOOD)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text(GAP)
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'sub' / 'b.py'}:1: torchrl.envs.DMControlEnv: no counterpart" in out
    assert "2 file(s) read, 1 to rewrite, 1 name(s) or argument(s)" in out


def test_write_rewrites_in_place_keeping_permissions(tmp_path: Path) -> None:
    script = tmp_path / "a.py"
    script.write_text(GOOD)
    script.chmod(0o750)
    assert main(["--write", str(script)]) == 0
    assert script.read_text() == GOOD.replace("torchrl.envs", "rl_envs")
    assert script.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]  # no temp file left


def test_bad_input_is_named_and_nothing_is_written(tmp_path: Path, capsys) -> None:
    good, broken, binary = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    good.write_text(GOOD)
    broken.write_text("import torch\nfrom torchrl.envs import (GymEnv\n")
    binary.write_bytes(b"\x00\x01torchrl")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--write", str(tmp_path), str(empty), str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert f"{broken}:" in err and "syntax error" in err
    assert f"{binary}: not a Python source file (binary data: a NUL byte at offset 0)" in err
    assert f"{empty}: no Python file (*.py) in this folder" in err
    assert f"{tmp_path / 'missing'}: no such file or folder" in err
    assert "nothing written" in err
    assert good.read_text() == GOOD  # nothing written half


def test_the_console_script_runs(tmp_path: Path) -> None:
    script = tmp_path / "a.py"
    script.write_text(GOOD)
    exe = Path(sys.executable).with_name("rl-migrate")
    done = subprocess.run([str(exe), "--check", str(script)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "+from rl_envs import GymEnv" in done.stdout
