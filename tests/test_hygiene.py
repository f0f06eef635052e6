"""The root conftest's session hygiene, run on small pytest sessions of their own.

Each session runs the repository's own ``conftest.py`` (copied beside its test file) in a
fresh Python: what a leaking test leaves (a ``multiprocessing`` temp dir with its listener
socket, a shared-memory entry carrying a child's pid) fails the session, named with the
test it appeared in, and is removed; a clean session passes, with a killed worker's temp
dir removed by ``kill_by_design`` and a doctest's ``mkdtemp`` landing in its ``tmp_path``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LEAKING = '''
import multiprocessing as mp
import os
import socket
import tempfile
import time
from pathlib import Path


def _skip_cleanup():
    from multiprocessing.connection import Listener
    listener = Listener(family="AF_UNIX")  # a pymp-* dir and a listener-* socket
    os._exit(0 if listener else 1)  # as a worker that skips its exit: nothing removes them


def _shm_child(name):
    Path("/dev/shm", name.format(pid=os.getpid())).write_bytes(b"x")
    time.sleep(1.5)  # lives long enough to be seen


def test_a_worker_exits_without_its_cleanup():
    proc = mp.get_context("spawn").Process(target=_skip_cleanup)
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0


def test_a_file_in_the_temp_dir():
    fd, _ = tempfile.mkstemp(prefix="left-")
    os.close(fd)


def test_shared_memory_of_a_child(shm_name):
    proc = mp.get_context("spawn").Process(target=_shm_child, args=(shm_name,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
'''

CLEAN = '''
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path


def _serve(ready):
    from multiprocessing.connection import Listener
    listener = Listener(family="AF_UNIX")
    ready.put(listener.address)
    time.sleep(120)


def test_a_killed_workers_temp_dir_is_removed(kill_by_design):
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(ready,))
    proc.start()
    address = Path(ready.get(timeout=60))
    assert address.parent.name.startswith("pymp-")
    assert address.parent.parent == Path(tempfile.gettempdir())  # the session's own dir
    assert kill_by_design(proc.pid) == [address.parent]
    proc.join(30)
    assert not address.parent.exists()
    ready.close()
    ready.join_thread()


def test_this_process_may_hold_its_own_until_exit():
    from multiprocessing.connection import Listener
    Listener(family="AF_UNIX")  # removed by multiprocessing when this process exits


def made_in_a_doctest():
    """
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> "/pytest-of-" in folder  # its tmp_path, not the session's temp dir
    True
    """
'''


def _session(tmp_path: Path, source: str, shm_name: str = "") -> subprocess.CompletedProcess:
    """Run ``source`` as one pytest session with the repository's conftest."""
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_session.py").write_text(textwrap.dedent(source))
    (tmp_path / "shm_fixture.py").write_text(
        f"import pytest\n\n@pytest.fixture\ndef shm_name():\n    return {shm_name!r}\n"
    )
    outer = Path(os.environ.get("TMPDIR", "/tmp"))
    before = {p.name for p in outer.iterdir()}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "shm_fixture", "-p", "no:cacheprovider",
         "--doctest-modules", "-q", "test_session.py"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True, text=True, timeout=240,
    )
    # the session's private dir is gone whatever the verdict
    assert not [n for n in {p.name for p in outer.iterdir()} - before if "rl-pytest" in n]
    return proc


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this platform")
@pytest.mark.timeout(300)
def test_a_leaking_session_fails_naming_what_was_left_and_by_which_test(tmp_path):
    shm_name = f"rl_hygiene_test_{os.getpid()}_{{pid}}"
    proc = _session(tmp_path, LEAKING, shm_name)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "3 passed" in out and "left behind by the tests" in out
    lines = [line for line in out.splitlines() if "appeared during" in line or "/dev/shm" in line]
    pymp = [line for line in lines if "/pymp-" in line]
    assert len(pymp) == 1 and "multiprocessing temp dir holding [listener-" in pymp[0]
    assert "(socket)" in pymp[0]
    assert "test_session.py::test_a_worker_exits_without_its_cleanup" in pymp[0]
    left = [line for line in lines if "/left-" in line]
    assert len(left) == 1
    assert ": file (appeared during test_session.py::test_a_file_in_the_temp_dir)" in left[0]
    shm = [line for line in lines if line.startswith("/dev/shm/")]
    assert len(shm) == 1 and "shared memory of this session's pid" in shm[0], out
    # removed: the next session starts clean
    assert not list(Path("/dev/shm").glob(f"rl_hygiene_test_{os.getpid()}_*"))


@pytest.mark.timeout(300)
def test_a_clean_session_passes_with_killed_workers_and_doctests(tmp_path):
    # a session killed before its end left its private dir; its pid is gone (> pid_max)
    stale = Path(os.environ.get("TMPDIR", "/tmp")) / "rl-pytest-999999999-killed"
    (stale / "pymp-x").mkdir(parents=True)
    proc = _session(tmp_path, CLEAN)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not stale.exists()  # removed by the next session to start there
    assert "3 passed" in proc.stdout and "left behind" not in proc.stdout
