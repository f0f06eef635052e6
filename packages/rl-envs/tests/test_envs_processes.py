"""``rl_envs.processes``: what crosses to a fresh process by reference or by value, what
cannot cross (named), what a worker that cannot load it says, and stopping processes.

Each "fresh process" here is a real interpreter (``subprocess``), started without this
test's ``sys.path`` additions, so "importable" means what it means for a spawned worker.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import multiprocessing.util
import os
import pickle
import subprocess
import sys
import threading
import time
import traceback

import pytest
import torch
from rl_envs import GymEnv, ParallelEnv, WorkerError
from rl_envs.processes import (
    BY_REFERENCE,
    BY_VALUE,
    Portable,
    dumps,
    error_summary,
    stop_processes,
)

LOAD_AND_CALL = (
    "import sys, pickle; from rl_envs.processes import loads; "
    "print(loads(sys.stdin.buffer.read(), 'create_env_fn')())"
)


def _in_fresh_process(data: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", LOAD_AND_CALL],
        input=data,
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": ""},
    )


def _main_function(source: str, name: str):
    """A function defined in ``__main__``, as a notebook cell or ``python -c`` defines it."""
    namespace = {"__name__": "__main__"}
    exec(source, namespace)
    return namespace[name]


def test_importable_code_goes_by_reference_the_rest_by_value():
    assert dumps(functools.partial(GymEnv, "CartPole-v1"), "create_env_fn")[:1] == BY_REFERENCE
    assert dumps(torch.nn.Linear(2, 2), "policy")[:1] == BY_REFERENCE
    assert dumps(lambda: 1, "create_env_fn")[:1] == BY_VALUE
    offset = 3
    assert dumps(lambda: offset, "create_env_fn")[:1] == BY_VALUE  # a closure
    assert dumps(_main_function("def f():\n    return 1\n", "f"), "create_env_fn")[:1] == BY_VALUE
    # this test module is not on sys.path (pytest's importlib mode): a worker could not import it
    assert dumps(_in_fresh_process, "create_env_fn")[:1] == BY_VALUE
    # reached through a container or a partial, __main__ still decides
    main_cls = _main_function("class Env:\n    pass\n", "Env")
    assert dumps({"factory": functools.partial(main_cls)}, "create_env_kwargs")[:1] == BY_VALUE


@pytest.mark.timeout(120)
def test_main_functions_and_closures_load_in_a_fresh_process():
    scale = 7
    make = _main_function("def make(x=6):\n    return x * SCALE\nSCALE = 7\n", "make")
    for fn, expected in (
        (make, "42"),
        (lambda: scale * 6, "42"),
        (functools.partial(max, 42, 1), "42"),
    ):
        out = _in_fresh_process(dumps(fn, "create_env_fn"))
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        assert out.stdout.decode().strip() == expected


def test_what_cannot_cross_is_named_with_both_reasons():
    lock = threading.Lock()
    with pytest.raises(pickle.PicklingError) as info:
        dumps({"lock": lock}, "create_env_kwargs")
    message = str(info.value)
    assert message.startswith(
        "create_env_kwargs: cannot be sent to a worker process; received {'lock': <"
    )
    assert "by reference: TypeError: cannot pickle '_thread.lock' object" in message
    assert "by value (cloudpickle): TypeError" in message
    assert "build them inside the worker" in message


@pytest.mark.timeout(120)
def test_a_reference_the_worker_cannot_import_fails_with_a_note(tmp_path, monkeypatch):
    (tmp_path / "only_here_mod.py").write_text("def make():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import only_here_mod

    data = dumps(only_here_mod.make, "create_env_fn")  # importable here: sent by reference
    assert data[:1] == BY_REFERENCE
    out = _in_fresh_process(data)  # a worker without tmp_path on its sys.path
    assert out.returncode != 0
    err = out.stderr.decode()
    assert "ModuleNotFoundError: No module named 'only_here_mod'" in err
    assert "while loading create_env_fn in this worker process: it was sent by reference" in err
    sys.modules.pop("only_here_mod")


def test_portable_loads_lazily_and_is_itself_in_the_parent():
    fn = lambda: 5  # noqa: E731
    wrapped = Portable(fn, "create_env_fn")
    assert wrapped.load() is fn
    copy = pickle.loads(pickle.dumps(wrapped))
    assert "to load" in repr(copy)
    assert copy.load()() == 5 and copy.load() is copy.load()


def test_error_summary_is_the_exception_line():
    def fail():
        try:
            raise KeyError("inner")
        except KeyError as err:
            exc = ValueError("no env called Nope-v0")
            exc.add_note("a note that is not the summary")
            raise exc from err

    try:
        fail()
    except ValueError:
        text = traceback.format_exc()
    assert error_summary(text) == "ValueError: no env called Nope-v0"
    assert error_summary(None) == "" and error_summary("") == ""


IGNORE_SIGTERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)\n"
)


@pytest.mark.timeout(120)
def test_stop_processes_escalates_to_kill_and_says_so(caplog):
    ctx = multiprocessing.get_context("spawn")
    stubborn = ctx.Process(target=exec, args=(IGNORE_SIGTERM,), name="stubborn")
    polite = ctx.Process(target=time.sleep, args=(120,), name="polite")
    stubborn.start()
    polite.start()
    time.sleep(2.0)  # let the stubborn one install its handler (an interpreter start)
    with caplog.at_level(logging.WARNING, logger="rl_envs.processes"):
        stop_processes([stubborn, polite], timeout=0.5)
    assert not stubborn.is_alive() and not polite.is_alive()
    assert stubborn.exitcode == -9 and polite.exitcode == -15
    assert "stubborn did not exit after close; calling kill()" in caplog.text
    stop_processes([stubborn, polite], timeout=0.5)  # idempotent


def broken_env():
    raise ValueError("no env called Nope-v0 here")


@pytest.mark.timeout(300)
def test_parallel_env_runs_lambdas_and_reports_a_raising_factory():
    env_id = "CartPole-v1"
    temp = multiprocessing.util.get_temp_dir()  # this process's own (it shares the buffers)
    before = set(os.listdir(os.path.dirname(temp)))
    with ParallelEnv(2, lambda: GymEnv(env_id)) as env:
        assert env.rollout(3).shape == (2, 3)
    # the workers end with os._exit, skipping multiprocessing's exit handlers: they must
    # leave no resource-sharer temp dir (they did when they sent their specs' tensors as fds)
    left = set(os.listdir(os.path.dirname(temp))) - before
    assert not [name for name in left if name.startswith("pymp-")], left
    with pytest.raises(WorkerError) as info:
        ParallelEnv(2, broken_env)
    first_line = str(info.value).splitlines()[0]
    assert "raised during 'create_env_fn': ValueError: no env called Nope-v0 here" in first_line
    assert "in broken_env" in info.value.remote_traceback
