"""rewrite_source: TorchRL imports to ours, layout kept, gaps found with their lines."""

from __future__ import annotations

import pytest
from rl_migrate import MigrateError, resolve, rewrite_source

SCRIPT = '''\
"""A TorchRL script."""
import torch  # untouched
from torchrl.envs import (
    GymEnv,  # the env
    ExplorationType,
)
from torchrl.envs.libs.gym import GymEnv as Gym
from torchrl.data import Bounded, LazyTensorStorage
import torchrl.envs.utils as env_utils
from torchrl.collectors import SyncDataCollector
from .local import thing

collector = SyncDataCollector(None, None, devices="cpu", frames_per_batch=8)
'''


def test_imports_are_rewritten_with_comments_and_shape_kept() -> None:
    out = rewrite_source(SCRIPT, "s.py")
    new = out.new_source
    assert "from rl_envs import (\n    GymEnv,  # the env\n" in new
    assert "from rl_modules import (\n    ExplorationType,\n" in new
    assert "from rl_envs.libs.gym import GymEnv as Gym\n" in new
    assert "from rl_envs import Bounded\nfrom rl_replay import LazyTensorStorage\n" in new
    assert "import rl_envs.utils as env_utils\n" in new
    assert "from rl_collectors import SyncDataCollector\n" in new
    assert new.startswith('"""A TorchRL script."""\nimport torch  # untouched\n')
    assert "from .local import thing\n" in new and "torchrl" not in new
    compile(new, "s.py", "exec")


def test_what_has_no_counterpart_is_kept_and_named_with_its_line() -> None:
    out = rewrite_source(SCRIPT + "from torchrl.envs import DMControlEnv, GymEnv\n", "s.py")
    assert "from torchrl.envs import DMControlEnv\nfrom rl_envs import GymEnv\n" in out.new_source
    found = [(f.line, f.symbol) for f in out.findings]
    assert found == [(13, "SyncDataCollector(devices=)"), (14, "torchrl.envs.DMControlEnv")]
    assert 'row "Collector arguments with no counterpart"' in str(out.findings[0])
    assert str(out.findings[1]).startswith("s.py:14: torchrl.envs.DMControlEnv: no counterpart")


def test_star_imports_and_bare_torchrl_are_findings() -> None:
    out = rewrite_source("import torchrl\nfrom torchrl.envs import *\n", "s.py")
    assert out.new_source == "import torchrl\nfrom torchrl.envs import *\n"
    assert [f.symbol for f in out.findings] == ["import torchrl", "from torchrl.envs import *"]


def test_a_file_without_torchrl_is_unchanged() -> None:
    source = "import torch\n\nx = torch.zeros(3)  # keep\n"
    out = rewrite_source(source)
    assert not out.changed and out.findings == []


def test_a_syntax_error_names_file_line_and_column() -> None:
    with pytest.raises(MigrateError, match=r"^bad\.py:2:\d+: syntax error"):
        rewrite_source("import torch\ndef f(:\n", "bad.py")


@pytest.mark.parametrize(("module", "name", "target"), [
    ("torchrl.data.replay_buffers.samplers", "SliceSampler", "rl_replay.replay_buffers.samplers"),
    ("torchrl.data", "Composite", "rl_envs"),
    ("torchrl.objectives.value", "GAE", "rl_objectives.value"),
    ("torchrl.envs.utils", "step_mdp", "rl_envs.utils"),
    ("torchrl.collectors", "VanillaWeightUpdater", "rl_collectors"),
])
def test_names_resolve_to_the_module_keeping_torchrl_s_path(module, name, target) -> None:
    assert resolve(module, name) == target
