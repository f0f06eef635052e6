"""NVTX ranges: the switch is inert without CUDA; the call path runs with stand-in push/pop."""

from __future__ import annotations

import json
import textwrap

import pytest
from rl_profiling import ARMED, nvtx_enabled, record, set_nvtx_enabled

STAND_IN = textwrap.dedent(
    """
    import json, sys
    import rl_profiling
    from rl_profiling import _ranges
    calls = []
    inert = rl_profiling.set_nvtx_enabled(True)  # no CUDA here: stays off
    with rl_profiling.record("Loop.before"):
        pass
    _ranges._set_nvtx_backend(lambda name: calls.append(["push", name]),\
 lambda: calls.append(["pop"]))
    @rl_profiling.profiled("Loop.step")
    def step():
        with rl_profiling.record("Loop.inner"):
            return 1
    step()
    rl_profiling.set_profiling_enabled(False)
    with rl_profiling.record("Loop.off"):
        pass
    print(json.dumps({"inert": inert, "on": rl_profiling.nvtx_enabled(), "calls": calls}))
    """
)


@pytest.mark.skipif(ARMED, reason="this pytest process was started with RL_PROFILING=1")
def test_switch_is_inert_without_cuda_and_off_path_unchanged() -> None:
    import torch

    assert set_nvtx_enabled(False) is False
    assert set_nvtx_enabled(True) is torch.cuda.is_available()
    assert record("A.b") is record(
        "C.d"
    )  # the shared no-op range: an un-armed process pays nothing
    set_nvtx_enabled(False)
    assert nvtx_enabled() is False


@pytest.mark.timeout(120)
def test_armed_ranges_push_and_pop_nvtx_in_order(run_py) -> None:
    out = json.loads(run_py(["-c", STAND_IN], armed=True).stdout.strip().splitlines()[-1])
    assert out["inert"] is False and out["on"] is True
    assert out["calls"] == [["push", "Loop.step"], ["push", "Loop.inner"], ["pop"], ["pop"]]


@pytest.mark.timeout(120)
def test_nvtx_env_var_without_cuda_is_harmless_and_lazy(run_py) -> None:
    code = (
        "import json, os, sys\n"
        "os.environ['RL_PROFILING_NVTX'] = '1'\n"
        "import rl_profiling\n"
        "at_import = 'torch' in sys.modules\n"
        "with rl_profiling.record('A.b'):\n"
        "    pass\n"
        "print(json.dumps([at_import, rl_profiling.nvtx_enabled()]))\n"
    )
    at_import, on = json.loads(run_py(["-c", code], armed=True).stdout.strip().splitlines()[-1])
    assert at_import is False and on is False
