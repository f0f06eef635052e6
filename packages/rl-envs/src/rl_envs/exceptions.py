"""Errors raised by rl-envs. Each message names the key, what was expected and what was received."""

from __future__ import annotations

from rl_envs.processes import error_summary

__all__ = ["EnvClosedError", "InvalidActionError", "NonFiniteError", "SpecError", "WorkerError"]


class SpecError(ValueError):
    """A value does not match its spec (key, expected and received shape/dtype/bounds)."""


class InvalidActionError(SpecError):
    """An action handed to ``step`` is outside the action spec, or has the wrong shape/dtype."""


class NonFiniteError(ValueError):
    """A NaN or inf in an observation, reward or action (``FiniteTensorDictCheck``, the
    collectors' ``check_finite``): the message names the key, the sub-env and the step."""


class EnvClosedError(RuntimeError):
    """An operation was attempted on an environment after ``close()``."""


class WorkerError(RuntimeError):
    """A worker process (a ``ParallelEnv`` env, a collector, a remote rank) raised, died
    or stopped answering.

    The one error every process-based component of rl-envs and rl-collectors raises for a
    worker (``rl_collectors.WorkerError`` is this class). Its message reads
    ``"<owner> worker <i>: <what happened>: <the worker's Type: message>"``, then the
    worker's traceback when there is one.

    Args:
        worker_index: index of the worker (0-based; ``-1`` when no single worker is to blame,
            e.g. no worker produced a batch in time).
        message: what happened, without the worker's index (``"raised during 'step'"``).
        remote_traceback: the worker's formatted traceback, or ``None`` when it died without
            one (killed, segfault) or timed out.
        alive: ``True`` when a command raised in a worker that is still running and serving
            (the component stays usable).
        owner: the component's name put before ``worker`` (``"ParallelEnv"``), or ``""``.

    Attributes:
        worker_index: as given.
        remote_traceback: as given (its ``Type: message`` line is also on the first line).
        alive: as given.

    Examples:
        >>> err = WorkerError(1, "raised during 'step'", owner="ParallelEnv")
        >>> str(err), err.worker_index, err.alive
        ("ParallelEnv worker 1: raised during 'step'", 1, False)
    """

    def __init__(self, worker_index: int, message: str, remote_traceback: str | None = None,
                 alive: bool = False, owner: str = ""):
        self.worker_index = worker_index
        self.remote_traceback = remote_traceback
        self.alive = alive
        self.owner = owner
        self.message = message
        text = f"{owner} worker {worker_index}: {message}".lstrip()
        summary = error_summary(remote_traceback)
        if summary and summary not in message:  # the worker's own exception, on the first line
            text += f": {summary}"
        if remote_traceback:
            text += f"\n--- traceback in worker {worker_index} ---\n{remote_traceback}"
        super().__init__(text)

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (type(self), (self.worker_index, self.message, self.remote_traceback, self.alive,
                             self.owner))
