"""rl-envs errors: the one ``WorkerError`` of rl-envs and rl-collectors."""

from __future__ import annotations

import pickle
import traceback

from rl_envs import WorkerError


def _formatted_traceback() -> str:
    try:
        raise ValueError("no env called Nope-v0 here")
    except ValueError:
        return traceback.format_exc()


def test_message_puts_the_workers_exception_on_the_first_line() -> None:
    text = _formatted_traceback()
    err = WorkerError(2, "raised during 'step'", text, owner="ParallelEnv")
    lines = str(err).splitlines()
    assert (
        lines[0]
        == "ParallelEnv worker 2: raised during 'step': ValueError: no env called Nope-v0 here"
    )
    assert lines[1] == "--- traceback in worker 2 ---"
    assert (err.worker_index, err.remote_traceback, err.alive) == (2, text, False)
    assert str(WorkerError(0, "died (exit code -9)")) == "worker 0: died (exit code -9)"


def test_fields_survive_pickling() -> None:
    err = WorkerError(1, "raised", _formatted_traceback(), alive=True, owner="ParallelEnv")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is WorkerError and str(copy) == str(err)
    assert (copy.worker_index, copy.remote_traceback, copy.alive, copy.owner) == (
        err.worker_index, err.remote_traceback, True, "ParallelEnv"
    )
