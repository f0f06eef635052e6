"""Session hygiene: the suite polices what its tests and their processes leave behind.

One pytest session collects every package's tests (``testpaths`` in the root
``pyproject.toml``), and this root conftest is loaded for any path under the repository.

At the start of the session a fresh private directory becomes the temp dir of this process
(``tempfile.tempdir``) and of every process it starts (``TMPDIR``, inherited). At the end,
anything still in it fails the session with a message naming each entry (a ``pymp-*``
directory of a process that died without its ``multiprocessing`` clean-up, its ``listener-*``
socket, a file) and the test during which it appeared; then it is removed. New ``/dev/shm``
entries that carry the pid of one of this session's processes fail it the same way. Only
what this session created is looked at: other sessions run on the same machine.

Left where they were: pytest's own ``tmp_path`` (``PYTEST_DEBUG_TEMPROOT``: pytest keeps its
last three base temp dirs by design), Ray's session logs (``RAY_TMPDIR``) and Inductor's
compile cache (``TORCHINDUCTOR_CACHE_DIR``), unless the caller set those variables.
A doctest runs with its own ``tmp_path`` as temp dir (its examples call ``tempfile.mkdtemp``
and leave the cleaning to the reader).
"""

from __future__ import annotations

import getpass
import multiprocessing.process
import multiprocessing.util
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

_SHM = Path("/dev/shm")
_PID_IN_NAME = re.compile(r"(?<![0-9a-f])(\d{2,9})(?![0-9a-f])")
_GRACE_S = 5.0  # processes of the last test may still be running their exit handlers


class _Hygiene:
    """The session's private temp dir, who made what in it, and the verdict at the end."""

    def __init__(self) -> None:
        root = tempfile.gettempdir()
        _remove_stale(Path(root))
        self.private = Path(tempfile.mkdtemp(prefix=f"rl-pytest-{os.getpid()}-", dir=root))
        user = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", root)
        os.environ.setdefault("RAY_TMPDIR", root)
        inductor = os.path.join(root, f"torchinductor_{user}")  # Inductor's default there
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor)
        os.environ["TMPDIR"] = str(self.private)
        tempfile.tempdir = None  # recomputed from TMPDIR on the next call
        assert tempfile.gettempdir() == str(self.private)
        self.made_by: dict[str, str] = {}  # entry name -> the test during which it appeared
        self.shm_before = _listdir(_SHM)
        self.pids = {os.getpid()}
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="hygiene-pids", daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        """Record this session's process tree twice a second: its shared-memory names carry
        their pids, and most are gone by the end."""
        while not self._stop.wait(0.5):
            self.pids |= _descendants(os.getpid())

    def saw(self, before: set[str], nodeid: str) -> None:
        """Record what appeared in the private dir while ``nodeid`` ran."""
        for name in _listdir(self.private) - before:
            self.made_by.setdefault(name, nodeid)

    def leftovers(self) -> list[str]:
        """One line per entry this session left: in the private dir, then in /dev/shm."""
        own = multiprocessing.process.current_process()._config.get("tempdir")  # noqa: SLF001
        lines = []
        for name in sorted(_listdir(self.private)):
            path = self.private / name
            if own is not None and path == Path(own):
                continue  # this process's own: multiprocessing removes it at exit
            if name.startswith("torchinductor_"):
                continue  # Inductor's cache (its precompiled headers): removed with the dir
            where = self.made_by.get(name, "outside any test")
            lines.append(f"{path}: {_describe(path)} (appeared during {where})")
        self.pids |= _descendants(os.getpid())
        for name in sorted(_listdir(_SHM) - self.shm_before):
            carried = {int(pid) for pid in _PID_IN_NAME.findall(name)} & self.pids
            if carried:
                lines.append(f"{_SHM / name}: shared memory of this session's pid {min(carried)}")
        return lines

    def finish(self) -> list[str]:
        """The verdict (waiting a little for exiting processes), then the clean-up."""
        self._stop.set()
        self._sampler.join()
        deadline = time.monotonic() + _GRACE_S
        lines = self.leftovers()
        while lines and time.monotonic() < deadline:
            self._stop.wait(0.2)
            lines = self.leftovers()
        for line in lines:
            path = Path(line.partition(": ")[0])
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        own = multiprocessing.process.current_process()._config.get("tempdir")  # noqa: SLF001
        if own is not None and Path(own).parent == self.private:
            # after multiprocessing's own finalizer (priority -100) has removed `own`
            multiprocessing.util.Finalize(
                None, shutil.rmtree, args=(self.private,), kwargs={"ignore_errors": True},
                exitpriority=-101,
            )
        else:
            shutil.rmtree(self.private, ignore_errors=True)
        return lines


def _remove_stale(root: Path) -> None:
    """Remove the private dirs of sessions that were killed before their end (their pid,
    in the name, is gone): nothing else would."""
    for path in root.glob("rl-pytest-*-*"):
        pid = path.name.split("-")[2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:  # alive, another user's
            continue


def _listdir(path: Path) -> set[str]:
    try:
        return set(os.listdir(path))
    except OSError:  # no /dev/shm on this platform, or the dir is gone
        return set()


def _descendants(pid: int) -> set[int]:
    """The live process tree under ``pid`` (Linux's ``/proc/<pid>/task/*/children``)."""
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    kids = {int(k) for k in f.read().split()}
            except (OSError, ValueError):
                continue
            todo.extend(kids - found)
            found |= kids
    return found


def _describe(path: Path) -> str:
    """``pymp-x/`` dirs and sockets named as such; a dir lists what it holds."""
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "gone"
    if stat.S_ISSOCK(mode):
        return "socket"
    if not stat.S_ISDIR(mode):
        return "file"
    kind = "multiprocessing temp dir" if path.name.startswith("pymp-") else "directory"
    inside = sorted(p.name + (" (socket)" if p.is_socket() else "") for p in path.iterdir())
    shown = ", ".join(inside[:5]) + (f", ... ({len(inside)} in all)" if len(inside) > 5 else "")
    return f"{kind} holding [{shown}]"


def owned_mp_dirs(pid: int) -> list[Path]:
    """The ``pymp-*`` temp dirs of ``pid``'s ``multiprocessing`` listeners (its open Unix
    sockets, matched by inode in ``/proc/net/unix``); ``[]`` where ``/proc`` cannot tell."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:["):-1])
        with open("/proc/net/unix") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:  # gone already, or not Linux
        return []
    paths = {Path(row[7]) for row in rows if len(row) > 7 and row[6] in inodes}
    return sorted({p.parent for p in paths if p.parent.name.startswith("pymp-")})


def _wait_dead(pid: int, timeout: float) -> None:
    """Until ``pid`` is a zombie or gone (never reaps it: its parent does)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    return
        except OSError:
            return
        time.sleep(0.02)


@pytest.fixture
def kill_by_design() -> Callable[..., list[Path]]:
    """``kill_by_design(pid, sig=SIGKILL)``: kill a worker as a test means to, then remove
    the ``multiprocessing`` temp dir it owned (its resource sharer's ``pymp-*`` dir and
    ``listener-*`` socket), which only its own clean exit would have removed. Returns the
    dirs removed."""

    def kill(pid: int, sig: int = signal.SIGKILL, timeout: float = 10.0) -> list[Path]:
        # A forked worker inherits this process's listener and its multiprocessing temp dir
        # (its own listener then lives in that dir too): that dir is this process's, which
        # removes it at exit and still needs it for the workers it starts next.
        ours = set(owned_mp_dirs(os.getpid()))
        own = multiprocessing.process.current_process()._config.get("tempdir")  # noqa: SLF001
        if own is not None:
            ours.add(Path(own))
        owned = [path for path in owned_mp_dirs(pid) if path not in ours]
        os.kill(pid, sig)
        _wait_dead(pid, timeout)
        for path in owned:
            shutil.rmtree(path, ignore_errors=True)
        return owned

    return kill


_STATE: dict[str, _Hygiene] = {}


def pytest_configure(config: pytest.Config) -> None:
    _STATE["session"] = _Hygiene()


def pytest_unconfigure(config: pytest.Config) -> None:
    """No session ran (``--help``, a usage error): remove the private dir, say nothing."""
    hygiene = _STATE.pop("session", None)
    if hygiene is not None:
        hygiene.finish()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    hygiene = _STATE.get("session")
    before = _listdir(hygiene.private) if hygiene is not None else set()
    try:
        return (yield)
    finally:
        if hygiene is not None:
            hygiene.saw(before, item.nodeid)


@pytest.fixture(autouse=True)
def _doctest_temp_dir(request: pytest.FixtureRequest) -> Iterator[None]:
    """A doctest's ``tempfile.mkdtemp()`` lands in its ``tmp_path`` (pytest cleans those)."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    saved = tempfile.tempdir
    tempfile.tempdir = str(request.getfixturevalue("tmp_path"))
    try:
        yield
    finally:
        tempfile.tempdir = saved


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    hygiene = _STATE.pop("session", None)
    if hygiene is None:
        return
    lines = hygiene.finish()
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = [
        "this session left behind what follows (removed now); tests and the processes they "
        "start must clean up what they create, also after a kill",
        *lines,
    ]
    if reporter is not None:
        reporter.ensure_newline()  # after the progress dots
        reporter.write_sep("=", "left behind by the tests", red=True, bold=True)
        for line in message:
            reporter.write_line(line)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
