"""The interface worker runtimes use to host a Collector, and the shared workers' profiling."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import pytest
import rl_collectors
from rl_collectors import Collector, MultiCollector
from rl_collectors._host import bind_hosted
from rl_envs import GymEnv

SRC = Path(rl_collectors.__file__).parent


def make_env(n: int = 2) -> GymEnv:
    return GymEnv("CartPole-v1", num_envs=n, categorical_action_encoding=True)


def test_bind_worker_strides_traj_ids_and_names_timing() -> None:
    collector = Collector(make_env(), frames_per_batch=40, total_frames=-1)
    try:
        collector.set_seed(0)
        collector.bind_worker(1, 3)
        ids = collector.rollout()["collector", "traj_ids"]
        assert collector.worker_idx == 1
        assert collector.timing.name == "Collector worker 1"
        assert bool((ids % 3 == 1).all()), ids
        assert ids.unique().numel() >= 2  # two sub-envs: at least two trajectories
    finally:
        collector.shutdown()


@pytest.mark.parametrize("idx, n", [(3, 3), (-1, 2)])
def test_bind_worker_rejects_an_index_out_of_range(idx: int, n: int) -> None:
    collector = Collector(make_env(), frames_per_batch=4, total_frames=-1)
    try:
        with pytest.raises(ValueError, match=rf"worker_idx < num_workers={n}, got {idx}"):
            collector.bind_worker(idx, n)
    finally:
        collector.shutdown()


def test_collect_view_is_the_batch_buffer_not_a_copy() -> None:
    collector = Collector(make_env(), frames_per_batch=8, total_frames=-1)
    try:
        obs = collector.buffer["observation"]
        view = collector.collect_view(2)
        assert view.batch_size == (2, 2)
        assert view["observation"].data_ptr() == obs.data_ptr()
        first = view["observation"].clone()
        collector.collect_view(2)  # the next call overwrites the same memory
        assert not bool((view["observation"] == first).all())
        assert collector.frames == 8 and collector.iterations == 2
    finally:
        collector.shutdown()


def test_share_buffer_moves_the_batch_to_shared_memory_and_keeps_collecting() -> None:
    collector = Collector(make_env(), frames_per_batch=8, total_frames=-1)
    try:
        assert not collector.buffer.is_shared()
        collector.share_buffer()
        assert collector.buffer.is_shared()
        view = collector.collect_view(4)
        assert view["observation"].data_ptr() == collector.buffer["observation"].data_ptr()
        assert bool(
            (view["next", "observation"] != 0).any()
        )  # the plans write into the shared batch
    finally:
        collector.shutdown()


def test_bind_hosted_by_capability() -> None:
    collector = Collector(make_env(), frames_per_batch=4, total_frames=-1)
    multi = MultiCollector([partial(make_env, 2)], frames_per_batch=4, in_process=True)
    try:
        assert bind_hosted(collector, 2, 4) is True
        assert collector.worker_idx == 2
        assert bind_hosted(multi, 0, 2) is False  # ids remapped by its host
    finally:
        collector.shutdown()
        multi.shutdown()


def test_workers_timing_report_and_profile_selection_in_process(tmp_path: Path) -> None:
    fns = [partial(make_env, 2)] * 2
    with MultiCollector(fns, frames_per_batch=8, total_frames=16, in_process=True) as collector:
        collector.enable_profile(workers=[1], num_rollouts=1, warmup_rollouts=0,
                                 save_path=str(tmp_path / "w{worker_idx}.json"))
        for _ in collector:
            pass
        written = collector.disable_profile()
        assert written == [str(tmp_path / "w1.json")]
        assert (tmp_path / "w1.json").exists() and not (tmp_path / "w0.json").exists()
        timings = collector.worker_timings()
        assert [t.name for t in timings] == ["Collector worker 0", "Collector worker 1"]
        report = collector.timing_report()
        assert report.startswith("Collector workers (sum over 2)")
        assert "Collector main process" in report


def test_hosts_use_no_collector_private() -> None:
    """Only ``_collector.py`` (and its mixins) touch a Collector's private attributes."""
    pattern = re.compile(r"\b(?:c|coll|collector|self\.collector|runtime\.collector)\._[a-z]\w*")
    offenders = []
    for path in sorted(SRC.glob("*.py")):
        if path.name in ("_collector.py", "_profiling.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []
