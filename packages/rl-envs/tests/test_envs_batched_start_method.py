"""``ParallelEnv``'s start method, TorchRL's rule: the one the program set with
``multiprocessing.set_start_method``, else ``"spawn"`` (issue 38).

TorchRL's ``torchrl_demo.py`` sets ``"fork"`` and builds a ``ParallelEnv`` at its top level
with no ``if __name__ == "__main__":`` guard; under ``"spawn"`` each worker would run the
whole script again before it is ready. Each case runs a real script file in a fresh
interpreter.
"""

from __future__ import annotations

import subprocess
import sys

FORK_NO_GUARD = """
import functools
import multiprocessing
multiprocessing.set_start_method("fork")
from rl_envs import GymEnv, ParallelEnv

print("top level ran", flush=True)
env = ParallelEnv(2, functools.partial(GymEnv, "CartPole-v1"))
assert env.rollout(5).shape == (2, 5)
kinds = {type(p).__name__ for p in multiprocessing.active_children()}
env.close()
print("workers:", ",".join(sorted(kinds)))
"""

SPAWN_TWICE = """
import functools
import multiprocessing
from rl_envs import GymEnv, ParallelEnv
from rl_envs.processes import start_process

if __name__ == "__main__":
    other = multiprocessing.get_context("spawn").Process(target=print)  # as a collector's
    start_process(other)
    other.join(60)
    kinds = set()
    for _ in range(2):  # an earlier spawn must not turn the next start into a fork
        with ParallelEnv(1, functools.partial(GymEnv, "CartPole-v1")) as env:
            kinds |= {type(p).__name__ for p in multiprocessing.active_children()}
    assert multiprocessing.get_start_method(allow_none=True) is None
    print("workers:", ",".join(sorted(kinds)))
"""


def _run(tmp_path, source: str) -> list[str]:
    script = tmp_path / "demo.py"  # a file, as a user's script: spawn re-imports it
    script.write_text(source)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=180,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


def test_fork_set_by_the_program_is_used(tmp_path):
    lines = _run(tmp_path, FORK_NO_GUARD)
    # forked workers do not run the script's top level again
    assert lines == ["top level ran", "workers: ForkProcess"]


def test_spawn_by_default_and_stays_the_default(tmp_path):
    assert _run(tmp_path, SPAWN_TWICE) == ["workers: SpawnProcess"]
