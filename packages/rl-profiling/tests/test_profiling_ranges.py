"""Named ranges: zero cost when not armed, real torch.profiler ranges when armed."""

from __future__ import annotations

import contextlib
import json

import pytest
import rl_profiling
from rl_profiling import (
    ARMED,
    profiled,
    profiling_enabled,
    profiling_env,
    record,
    set_profiling_enabled,
)

not_armed = pytest.mark.skipif(ARMED, reason="this pytest process was started with RL_PROFILING=1")

BLOCK_TORCH = "import sys; sys.modules['torch'] = None\n"


def test_every_exported_name_imports() -> None:
    assert rl_profiling.__all__ == sorted(rl_profiling.__all__)
    for name in rl_profiling.__all__:
        assert getattr(rl_profiling, name) is not None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("armed", [False, True])
def test_import_never_imports_torch(run_py, armed: bool) -> None:
    code = "import sys, rl_profiling; print(rl_profiling.ARMED, 'torch' in sys.modules)"
    assert run_py(["-c", code], armed=armed).stdout.split() == [str(armed), "False"]


@not_armed
def test_profiled_returns_the_same_function_when_not_armed() -> None:
    def step(x: int) -> int:
        return x + 1

    assert profiled("EnvBase.step")(step) is step
    assert step(1) == 2


@not_armed
def test_record_returns_one_shared_nullcontext_when_off() -> None:
    first, second = record("EnvBase.step"), record("Collector.policy")
    assert first is second
    assert isinstance(first, contextlib.nullcontext)
    with first as value:
        assert value is None


@pytest.mark.parametrize("name", ["", None, 3])
def test_profiled_rejects_bad_names(name: object) -> None:
    with pytest.raises(TypeError, match="non-empty str"):
        profiled(name)  # type: ignore[arg-type]


@not_armed
def test_enabling_without_arming_warns_and_does_nothing() -> None:
    with pytest.warns(RuntimeWarning, match="RL_PROFILING=1 was not set"):
        set_profiling_enabled(True)
    assert profiling_enabled() is False
    assert profiling_env() == {}
    set_profiling_enabled(False)  # disabling is always allowed, silently


UNARMED_WORKS = (
    "import json\n"
    "from rl_profiling import profiled, record, Timing, ProfileConfig, ProfilerHook\n"
    "def f(): return 1\n"
    "assert profiled('x')(f) is f and record('a') is record('b')\n"
    "t = Timing(cuda_sync=True)\n"
    "with t.add_time('a'): pass\n"
    "print(json.dumps(['ok', sorted(t.to_dict())]))\n"
)

STDLIB_RECORDER = (
    "import json, sys\n"
    "from rl_profiling import RECORDER, profiled, record\n"
    "@profiled('EnvBase.step')\n"
    "def step(): return 1\n"
    "step()  # no recording open: nothing kept\n"
    "RECORDER.start()\n"
    "with record('Collector.rollout'):\n"
    "    step()\n"
    "RECORDER.stop()\n"
    "step()\n"
    "print(json.dumps([e['name'] for e in RECORDER.events]))\n"
)

RUNTIME_TOGGLE = (
    "import json\n"
    "from rl_profiling import profiled, profiling_enabled, profiling_env, record, "
    "set_profiling_enabled\n"
    "def step():\n"
    "    'Step the env.'\n"
    "    return 7\n"
    "wrapped = profiled('EnvBase.step')(step)\n"
    "out = [wrapped is not step, wrapped.__name__, wrapped.__doc__, wrapped()]\n"
    "out += [profiling_enabled(), profiling_env()]\n"
    "set_profiling_enabled(False)\n"
    "out += [profiling_enabled(), profiling_env(), record('a') is record('b'), wrapped()]\n"
    "set_profiling_enabled(True)\n"
    "out += [profiling_enabled(), profiling_env()]\n"
    "print(json.dumps(out))\n"
)

RUNTIME_TOGGLE_OUT = [
    True, "step", "Step the env.", 7,
    True, {"RL_PROFILING": "1"},
    False, {}, True, 7,
    True, {"RL_PROFILING": "1"},
]  # fmt: skip

SPAWNED_CHILDREN = (
    "import json, multiprocessing as mp, subprocess, sys\n"
    "import rl_profiling\n"
    "if __name__ == '__main__':\n"
    "    with mp.get_context('spawn').Pool(1) as pool:\n"
    "        child = pool.apply(rl_profiling.profiling_enabled)\n"
    "        pool.close(); pool.join()\n"
    "    env = {k: v for k, v in __import__('os').environ.items() if k != 'RL_PROFILING'}\n"
    "    env.update(rl_profiling.profiling_env())\n"
    "    sub = subprocess.run([sys.executable, '-c', "
    "'import rl_profiling; print(rl_profiling.ARMED)'],\n"
    "                         env=env, capture_output=True, text=True, "
    "check=True).stdout.strip()\n"
    "    print(json.dumps([rl_profiling.ARMED, child, sub]))\n"
)


def _torchless(
    name: str, armed: bool, script: str, expected: list, timeout: int = 60
) -> pytest.param:
    return pytest.param(armed, script, expected, id=name, marks=pytest.mark.timeout(timeout))


@pytest.mark.parametrize(
    ("armed", "script", "expected"),
    [
        _torchless("unarmed_works", False, UNARMED_WORKS, ["ok", ["a"]]),
        # the inner range closes first
        _torchless(
            "armed_records_to_the_stdlib_recorder",
            True,
            STDLIB_RECORDER,
            ["EnvBase.step", "Collector.rollout"],
        ),
        _torchless(
            "runtime_toggle_when_armed",
            True,
            RUNTIME_TOGGLE,
            RUNTIME_TOGGLE_OUT,
        ),
        _torchless(
            "spawned_children_come_up_armed", True, SPAWNED_CHILDREN, [True, True, "True"], 90
        ),
    ],
)
def test_script_with_torch_unimportable(run_py, armed: bool, script: str, expected: list) -> None:
    """Each script runs in a fresh Python in which ``import torch`` fails."""
    out = run_py(["-c", BLOCK_TORCH + script], armed=armed).stdout
    assert json.loads(out) == expected


@pytest.mark.timeout(300)
def test_armed_ranges_appear_in_a_real_torch_profiler(torch_run) -> None:
    report, _ = torch_run
    assert report["armed"] is True
    # enabled, but no profiler running: no record_function is built
    assert report["null_outside_profiler"] is True and report["null_inside_profiler"] is False
    expected = {"EnvBase.step", "Collector.policy", "Collector.rollout", "ReplayBuffer.extend"}
    assert expected <= set(report["profiler_names"])
    assert "aten::addmm" in report["profiler_names"]  # the policy's ops, under Collector.policy
    # disabled at runtime: torch still sees its ops, but none of our ranges
    assert not expected & set(report["disabled_names"])
    assert "aten::addmm" in report["disabled_names"]
