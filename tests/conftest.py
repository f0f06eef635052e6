"""Shared fixtures of the cross-package integration tests."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import psutil
import pytest


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:  # no /dev/shm on this platform
        return set()


def _interpreter_service(proc: psutil.Process) -> bool:
    """multiprocessing's resource tracker: started with the first spawned process, it lives
    as long as the interpreter by design (it is what unlinks leaked segments at exit)."""
    try:
        return any("resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return True  # gone meanwhile


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail if the test leaves child processes or new /dev/shm segments behind."""
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    shm_before = _shm_entries()
    yield
    deadline = time.monotonic() + 10.0
    while True:
        alive = [
            p
            for p in me.children(recursive=True)
            if p.pid not in children_before and p.is_running()
        ]
        alive = [
            p for p in alive if p.status() != psutil.STATUS_ZOMBIE and not _interpreter_service(p)
        ]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not alive, f"child processes left behind: {[(p.pid, p.cmdline()) for p in alive]}"
    leaked = {
        name for name in _shm_entries() - shm_before if name.startswith(("torch_", "psm_", "rl_"))
    }
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"


@pytest.fixture
def bench_script() -> Callable[[str], ModuleType]:
    """``bench_script(name)``: ``benchmarks/<name>.py`` executed as a fresh module (named
    ``<name>_under_test`` only while it runs, so that its dataclasses resolve)."""

    def load(name: str) -> ModuleType:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[spec.name]
        return module

    return load


# -- processes forked from one interpreter that imported torch once (a zygote) -------------
# The zygote imports the third-party heavyweights, then forks a child per request line
# (JSON). The child leaves the serving loop and runs a script (as `python SCRIPT ARGS`) or
# code (as `python -c CODE ARGS`) as `__main__` of its own process, with its own stdin,
# stdout, stderr, cwd and environment, and ends as an interpreter does (atexit, then exit);
# the zygote reaps it and writes its exit status as `Popen.returncode` has it (-9: SIGKILL).
# The project's own packages are not preloaded: each child imports them as a user's
# process does (what they read at import, e.g. RL_PROFILING, is read in the child).
ZYGOTE = r"""
import json, os, random, runpy, select, signal, sys, tempfile, types
import gymnasium, numpy, tensordict, torch

def reap(running):
    for pid in list(running):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            path = running.pop(pid)
            with open(path + ".tmp", "w") as f:
                f.write(str(os.waitstatus_to_exitcode(status)))
            os.replace(path + ".tmp", path)

def serve():
    running, buf = {}, b""
    while True:
        reap(running)
        if not select.select([0], [], [], 0.02)[0]:
            continue
        data = os.read(0, 1 << 16)
        if not data:  # EOF: kill what is left, reap it, exit
            for pid in running:
                os.kill(pid, signal.SIGKILL)
            while running:
                reap(running)
                select.select([], [], [], 0.02)
            os._exit(0)  # nothing of the interpreter's own shutdown is needed
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                return request
            running[pid] = request["files"] + ".rc"
            os.write(1, b"%d\n" % pid)

request = serve()
if request["new_session"]:
    os.setsid()
for fd, suffix, flags in ((0, ".in", os.O_RDONLY), (1, ".out", os.O_WRONLY | os.O_CREAT),
                          (2, ".err", os.O_WRONLY | os.O_CREAT)):
    os.dup2(os.open(request["files"] + suffix, flags), fd)
os.chdir(request["cwd"])
os.environ.update(request["env"])
tempfile.tempdir = None  # TMPDIR is read again
random.seed()  # a fresh process draws its own seeds; forks would share the zygote's
numpy.random.seed()
main = types.ModuleType("__main__")
main.__builtins__ = __builtins__
sys.modules["__main__"] = main
if request["script"] is not None:
    sys.argv = [request["script"], *request["argv"]]
    sys.path[0] = os.path.dirname(request["script"])
    runpy.run_path(request["script"], run_name="__main__")
else:
    sys.argv = ["-c", *request["argv"]]
    sys.path[0] = ""
    exec(compile(request["code"], "<string>", "exec"), main.__dict__)
"""


class Launched:
    """A ``Popen``-like handle on a process the zygote forked. It is not this process's
    child: its exit status comes from the file the zygote writes when it reaps it."""

    def __init__(self, pid: int, files: Path) -> None:
        self.pid, self.returncode, self._files = pid, None, files

    def poll(self) -> int | None:
        rc = self._files.with_suffix(".rc")
        if self.returncode is None and rc.exists():
            self.returncode = int(rc.read_text())
        return self.returncode

    def wait(self, timeout: float) -> int:
        """The exit status; ``subprocess.TimeoutExpired`` if it runs past ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not reaped yet, so the pid is still its own
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def stdout(self) -> str:
        return self._files.with_suffix(".out").read_text()

    def stderr(self) -> str:
        return self._files.with_suffix(".err").read_text()

    def communicate(self, timeout: float = 60) -> tuple[str, str]:
        self.wait(timeout)
        return self.stdout(), self.stderr()


class Zygote:
    """Starts processes fast: forks of one interpreter that has imported torch,
    tensordict, gymnasium and numpy (~5 s idle, ~15 s and more loaded, per fresh process).
    ``launch`` takes a script or code, like ``python SCRIPT ARGS`` / ``python -c CODE ARGS``."""

    def __init__(self, env: dict[str, str]) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="rl-zygote-"))
        self._count = 0
        self._proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip

    def launch(self, *, cwd: Path, script: Path | None = None, code: str | None = None,
               argv: Sequence[str] = (), stdin: str = "", env: dict[str, str] | None = None,
               new_session: bool = False) -> Launched:  # fmt: skip
        assert (script is None) != (code is None), "a script or code, one of them"
        self._count += 1
        files = self._dir / f"launch-{self._count}"
        files.with_suffix(".in").write_text(stdin)
        for suffix in (".out", ".err"):
            files.with_suffix(suffix).write_text("")
        request = {"script": None if script is None else str(script), "code": code,
                   "argv": list(argv), "cwd": str(cwd), "env": env or {},
                   "new_session": new_session, "files": str(files)}  # fmt: skip
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        assert line, f"the zygote is gone (exit status {self._proc.wait(10)})"
        return Launched(int(line), files)

    def close(self) -> None:
        self._proc.stdin.close()  # EOF: it kills and reaps what is left, then exits
        try:
            self._proc.wait(60)
        finally:
            self._proc.kill()
            self._proc.wait()
            self._proc.stdout.close()
            shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One zygote per test module, started before the module's first test (so that
    ``no_leaks`` counts it as there before); RL_PROFILING and PYTHONPATH are not passed on."""
    env = {k: v for k, v in os.environ.items() if k not in ("RL_PROFILING", "PYTHONPATH")}
    forks = Zygote(env)
    try:
        yield forks
    finally:
        forks.close()
