"""Launchers: how the collector ranks (1..N) of a torch.distributed collector are started.

- :class:`MPLauncher` (``launcher="mp"``, the default): one process per rank on this
  machine, from ``torch.multiprocessing``'s spawn context.
- :class:`SubmititLauncher` (``launcher="submitit"``): one submitit job per rank, on
  Slurm (``submitit.AutoExecutor``) or, for testing on one machine, submitit's
  ``LocalExecutor`` (``executor="local"``).
- :func:`submitit_delayed_launcher`: a decorator that submits the training function as a
  job *and* ``num_jobs`` collector jobs that connect to it; inside, the collector is built
  with ``launcher="submitit_delayed"`` and starts nothing.

A launcher only starts ``target(*args)`` per rank and answers ``alive()``; the ranks find
the trainer through the address and port in their arguments (see ``_distributed_worker``).
submitit is the ``[submitit]`` extra, imported lazily by :func:`import_submitit`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rl_envs.processes import start_process, stop_processes

from rl_collectors.exceptions import WorkerError

__all__ = [
    "LaunchedRank",
    "MPLauncher",
    "launch_ranks",
    "SubmititLauncher",
    "import_submitit",
    "make_launcher",
    "submitit_delayed_launcher",
]

SUBMITIT_MISSING = ("submitit is not installed: launcher='submitit' needs the [submitit] extra, "
                    "`pip install rl-collectors[submitit]`")
LAUNCHERS = ("mp", "submitit", "submitit_delayed")
DELAYED_ENV = "RL_COLLECTORS_DELAYED"
"""The variable holding ``"host:port:world_size"``, set in the trainer job by the decorator."""


def import_optional(name: str, missing: str) -> Any:
    """Import and return the optional module ``name`` (an extra of rl-collectors).

    Raises:
        ModuleNotFoundError: it is not installed; the message is ``missing`` (how to
            install it).
    """
    if importlib.util.find_spec(name) is None:
        raise ModuleNotFoundError(missing, name=name)
    return importlib.import_module(name)


def import_submitit() -> Any:
    """Import and return ``submitit``, with an install hint when it is missing."""
    return import_optional("submitit", SUBMITIT_MISSING)


class LaunchedRank:
    """Trainer-side handle of one started rank: liveness, a description, and stop.

    Args:
        rank: the rank in the collection group (1..N).
        alive: ``() -> bool``.
        describe: ``() -> str`` (e.g. ``"pid 4242, exit code -9"``).
        stop: ``(timeout) -> None``: end the rank, bounded.
    """

    def __init__(self, rank: int, alive: Callable[[], bool], describe: Callable[[], str],
                 stop: Callable[[float], None]) -> None:
        self.rank, self.alive, self.describe, self.stop = rank, alive, describe, stop


def launch_ranks(
    launcher: Any, target: Callable, extra: tuple, num_ranks: int, handles: dict[int, Any],
    opts: Any, timeout: float, ready_key: str, name: str = "rank", multi_tenant: bool = False,
) -> Any:
    """Host the trainer's ``TCPStore``, start ranks ``1..num_ranks`` with ``launcher``
    (``target(addr, port, rank, world_size, *extra)``; their handles go into ``handles``)
    and wait until each has written ``ready_key``, checking the launcher's liveness
    meanwhile. ``launcher=None``: the ranks are started by someone else. Returns
    ``(store, addr)``.

    Raises:
        WorkerError: a rank ended before joining, or did not join within ``start_timeout``.
    """
    import datetime

    import torch.distributed as dist

    world = num_ranks + 1
    addr = opts.master_addr or getattr(launcher, "default_addr", "127.0.0.1")
    store = dist.TCPStore(
        "0.0.0.0", opts.tcp_port or 0, world, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout), multi_tenant=multi_tenant,
    )
    if launcher is not None:
        args = [(addr, store.port, r, world, *extra) for r in range(1, world)]
        handles.update({h.rank: h for h in launcher.launch(target, args)})
    deadline = time.monotonic() + timeout
    for rank in range(1, world):
        while not store.check([ready_key.format(rank=rank)]):
            handle = handles.get(rank)
            if handle is not None and not handle.alive():
                raise WorkerError(
                    rank - 1, f"{name} {rank} ended before joining ({handle.describe()})"
                )
            if time.monotonic() > deadline:
                raise WorkerError(
                    rank - 1, f"{name} {rank} did not join within {timeout} s (processes start "
                    "Python and import torch; raise start_timeout)",
                )
            time.sleep(0.05)
    return store, addr


class MPLauncher:
    """Start each rank as a ``torch.multiprocessing`` spawn-context process on this machine.

    Examples:
        >>> launcher = MPLauncher()
        >>> launcher.default_addr
        '127.0.0.1'
    """

    default_addr = "127.0.0.1"

    def launch(self, target: Callable, args: Sequence[tuple]) -> list[LaunchedRank]:
        """Start ``target(*a)`` for each ``a`` of ``args`` (rank ``i + 1`` gets ``args[i]``)."""
        import torch.multiprocessing as tmp

        ctx = tmp.get_context("spawn")
        handles = []
        for rank, a in enumerate(args, start=1):
            proc = ctx.Process(
                target=target, args=a, name=f"rl-distributed-rank-{rank}", daemon=False
            )
            start_process(proc)
            handles.append(
                LaunchedRank(
                    rank,
                    proc.is_alive,
                    functools.partial(_describe_process, proc),
                    functools.partial(_stop_process, proc),
                )
            )
        return handles


def _describe_process(proc: Any) -> str:
    code = proc.exitcode
    return f"pid {proc.pid}, " + ("alive" if code is None else f"exit code {code}")


def _stop_process(proc: Any, timeout: float) -> None:
    """Join, then terminate, then kill; bounded by ``3 * timeout``."""
    stop_processes([proc], timeout)


class SubmititLauncher:
    """Start each rank as a submitit job (Slurm, or submitit's local executor).

    Args:
        executor: ``"auto"`` (``submitit.AutoExecutor``: Slurm when ``sbatch`` exists,
            else local), ``"slurm"``, ``"local"``, or a submitit ``Executor`` you built.
        folder: where submitit writes its logs and pickles (a shared filesystem on Slurm).
        slurm_kwargs: parameters for ``executor.update_parameters`` (``timeout_min``,
            ``cpus_per_task``, ``gpus_per_node``, ``slurm_partition``, ...).

    Raises:
        ModuleNotFoundError: submitit is not installed.
        ValueError: ``executor`` is not one of the accepted values.
    """

    def __init__(self, executor: Any = "auto", folder: str | os.PathLike = "submitit_logs",
                 slurm_kwargs: dict[str, Any] | None = None) -> None:
        self.executor = make_executor(executor, folder, slurm_kwargs)
        local = (
            type(self.executor).__name__ == "LocalExecutor"
            or getattr(self.executor, "cluster", "") == "local"
        )
        self.default_addr = "127.0.0.1" if local else socket.gethostname()

    def launch(self, target: Callable, args: Sequence[tuple]) -> list[LaunchedRank]:
        handles = []
        for rank, a in enumerate(args, start=1):
            job = self.executor.submit(target, *a)
            handles.append(
                LaunchedRank(
                    rank,
                    functools.partial(_job_alive, job),
                    functools.partial(_describe_job, job),
                    functools.partial(_stop_job, job),
                )
            )
        return handles


def make_executor(
    executor: Any, folder: str | os.PathLike, slurm_kwargs: dict[str, Any] | None
) -> Any:
    """A submitit executor from a name (``"auto"``, ``"slurm"``, ``"local"``) or as given."""
    submitit = import_submitit()
    params = {"timeout_min": 24 * 60, **(slurm_kwargs or {})}
    if isinstance(executor, str):
        kinds = {
            "auto": submitit.AutoExecutor,
            "slurm": submitit.SlurmExecutor,
            "local": submitit.LocalExecutor,
        }
        if executor not in kinds:
            raise ValueError(
                "executor: expected 'auto', 'slurm', 'local' or a submitit Executor, "
                f"got {executor!r}"
            )
        if executor == "slurm":
            params.pop("timeout_min")
            params.setdefault("time", 24 * 60)
        executor = kinds[executor](folder=str(folder))
    executor.update_parameters(**params)
    return executor


def _job_alive(job: Any) -> bool:
    try:
        return not job.done()
    except Exception:  # the scheduler did not answer: assume alive, the timeouts still apply
        return True


def _describe_job(job: Any) -> str:
    return f"submitit job {job.job_id}, state {job.state}"


def _stop_job(job: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _job_alive(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _job_alive(job):
        job.cancel(check=False)
        deadline = time.monotonic() + 3 * timeout
        while _job_alive(job) and time.monotonic() < deadline:
            time.sleep(0.05)
    process = getattr(job, "_process", None)  # the local executor's controller process
    if process is not None:
        if process.poll() is None:
            process.kill()
        process.wait(timeout)


def make_launcher(
    launcher: Any, submitit_executor: Any, submitit_folder: Any, slurm_kwargs: Any
) -> Any:
    """The launcher object for ``launcher`` (``None`` for ``"submitit_delayed"`` and ``None``)."""
    if launcher is None:
        return None
    if launcher == "mp":
        return MPLauncher()
    if launcher == "submitit":
        return SubmititLauncher(submitit_executor, submitit_folder, slurm_kwargs)
    if launcher == "submitit_delayed":
        return None
    raise ValueError(
        f"launcher: expected one of {LAUNCHERS} or None (an initialised process group), "
        f"got {launcher!r}"
    )


def submitit_delayed_launcher(
    num_jobs: int,
    *,
    tcp_port: int = 10003,
    executor: Any = "auto",
    folder: str | os.PathLike = "submitit_logs",
    main_kwargs: dict[str, Any] | None = None,
    collection_kwargs: dict[str, Any] | None = None,
    backend: str = "gloo",
    timeout: float = 300.0,
) -> Callable[[Callable], Callable]:
    """Decorate a training function so that calling it submits it and ``num_jobs`` collectors.

    Calling the decorated function submits it as one job (the trainer, rank 0), waits
    until that job has written the host it runs on into ``folder``, then submits
    ``num_jobs`` collector jobs (ranks 1..num_jobs) that connect to that host on
    ``tcp_port``. Inside the function, build the collector with
    ``launcher="submitit_delayed"`` and ``tcp_port`` equal to this one; it starts
    nothing and waits for the collector jobs. The call returns the trainer's submitit
    ``Job`` (``job.result()`` is the function's return value).

    Args:
        num_jobs: number of collector jobs (the collector's number of nodes).
        tcp_port: the port the trainer listens on for the collectors.
        executor: as for :class:`SubmititLauncher` (``"local"`` runs everything here).
        folder: submitit's folder (shared by the trainer and collector jobs).
        main_kwargs: ``update_parameters`` of the trainer job.
        collection_kwargs: ``update_parameters`` of the collector jobs.
        backend: the torch.distributed backend of the collector ranks.
        timeout: seconds the trainer job may take to start and report its host.

    Returns:
        A decorator.

    Raises:
        ValueError: ``num_jobs`` is not an int >= 1.
        ModuleNotFoundError: submitit is not installed (when the function is called).

    Examples:
        >>> @submitit_delayed_launcher(num_jobs=2, executor="local")
        ... def main():
        ...     ...  # DistributedDataCollector(..., launcher="submitit_delayed")
        >>> callable(main)
        True
    """
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, int) or num_jobs < 1:
        raise ValueError(f"num_jobs: expected an int >= 1, got {num_jobs!r}")

    def decorator(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def submit(*args: Any, **kwargs: Any) -> Any:
            from rl_collectors._distributed_worker import run_rank

            host_file = Path(folder) / f"trainer_host_{os.getpid()}_{time.monotonic_ns()}.txt"
            main_exec = make_executor(executor, folder, main_kwargs)
            job = main_exec.submit(
                _run_trainer, fn, args, kwargs, str(host_file), tcp_port, num_jobs + 1
            )
            host = _wait_for_host(host_file, job, timeout)
            coll_exec = make_executor(executor, folder, collection_kwargs)
            job.collector_jobs = [
                coll_exec.submit(run_rank, host, tcp_port, rank, num_jobs + 1, backend, timeout)
                for rank in range(1, num_jobs + 1)
            ]
            return job

        return submit

    return decorator


def _run_trainer(
    fn: Callable, args: tuple, kwargs: dict, host_file: str, port: int, world_size: int
) -> Any:
    """The trainer job: write this host for the collector jobs, then run ``fn``."""
    host = "127.0.0.1" if os.environ.get("SUBMITIT_EXECUTOR") == "local" else socket.gethostname()
    os.environ[DELAYED_ENV] = f"{host}:{port}:{world_size}"
    tmp = Path(host_file).with_suffix(".tmp")
    tmp.write_text(host)
    tmp.replace(host_file)
    return fn(*args, **kwargs)


def _wait_for_host(host_file: Path, job: Any, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not host_file.exists():
        if not _job_alive(job):
            raise RuntimeError(f"submitit_delayed_launcher: the trainer job ended before starting: "
                               f"{_describe_job(job)}; see its logs in {job.paths.stderr}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"submitit_delayed_launcher: the trainer job did not start within {timeout} s "
                f"({_describe_job(job)})"
            )
        time.sleep(0.1)
    host = host_file.read_text().strip()
    host_file.unlink()
    return host
