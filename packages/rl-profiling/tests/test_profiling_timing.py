"""Timing: nested add_time / timeit / time_avg blocks, the tree report, merge, pickling."""

from __future__ import annotations

import pickle
import re
import time

import pytest
from rl_profiling import Timing


def _loop(timing: Timing, iterations: int = 2) -> Timing:
    for _ in range(iterations):
        with timing.add_time("collect"):
            with timing.add_time("env"):
                pass
            with timing.time_avg("policy", n=4):
                pass
        with timing.add_time("train"):
            with timing.add_time("loss"), timing.timeit("forward"):
                pass
            with timing.add_time("optim"):
                pass
        with timing.timeit("log"):
            pass
    return timing


def test_report_is_a_tree_with_leaf_siblings_on_one_line() -> None:
    report = re.sub(r"\d+\.\d+(e-\d+)?", "T", _loop(Timing("Run")).report())
    assert report.splitlines() == [
        "Run:",
        "  log: T",
        "  collect: T",
        "    env: T, policy: T",
        "  train: T",
        "    optim: T",
        "    loss: T",
        "      forward: T",
    ]
    assert str(_loop(Timing("Run"))).startswith("Run:\n")
    assert Timing().report() == "Timing:\n  (nothing timed)"


def test_to_dict_flattens_paths_and_counts() -> None:
    timing = _loop(Timing(), iterations=3)
    flat = timing.to_dict()
    assert list(flat) == [
        "collect", "collect/env", "collect/policy",
        "train", "train/loss", "train/loss/forward", "train/optim", "log",
    ]  # fmt: skip
    assert all(isinstance(v, float) and v >= 0 for v in flat.values())
    assert list(timing.to_dict(prefix="timing/"))[0] == "timing/collect"
    assert timing["train/loss/forward"] == flat["train/loss/forward"]
    assert timing.count("collect/env") == 3 and timing.count("log") == 3
    assert "train/loss" in timing and "train/nope" not in timing
    with pytest.raises(KeyError, match="no Timing key 'train/nope'"):
        timing["train/nope"]


def test_add_time_accumulates_timeit_keeps_last_time_avg_averages() -> None:
    timing = Timing()
    for sleep in (0.06, 0.0, 0.0):
        with timing.add_time("total"):
            time.sleep(sleep)
        with timing.timeit("last"):
            time.sleep(sleep)
        with timing.time_avg("avg", n=2):
            time.sleep(sleep)
    assert timing["total"] >= 0.06
    assert timing["last"] < 0.03  # the 0.06 s block was replaced
    assert timing["avg"] < 0.03  # the 0.06 s block left the window of 2
    assert timing.count("avg") == 3


def test_a_block_that_raises_is_still_timed() -> None:
    timing = Timing()
    with pytest.raises(ZeroDivisionError), timing.add_time("step"):
        1 / 0  # noqa: B018
    assert timing.count("step") == 1
    with timing.add_time("after"):  # the stack is back at the root
        pass
    assert list(timing.to_dict()) == ["step", "after"]


def test_mistakes_are_reported() -> None:
    timing = Timing()
    with timing.add_time("a"):
        pass
    with pytest.raises(ValueError, match=r"'a' was timed with add_time, now with timeit"):
        timing.timeit("a").__enter__()
    with timing.time_avg("b", n=3):
        pass
    with pytest.raises(ValueError, match=r"time_avg\(n=3\), now with time_avg\(n=5\)"):
        timing.time_avg("b", n=5).__enter__()
    for bad in ("", "a/b", 3):
        with pytest.raises(ValueError, match="non-empty str without '/'"):
            timing.add_time(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected an int >= 1"):
        timing.time_avg("c", n=0)
    with pytest.raises(TypeError, match="expected a str"):
        Timing(name=3)  # type: ignore[arg-type]


def test_blocks_closed_out_of_order_raise() -> None:
    timing = Timing()
    outer, inner = timing.add_time("outer"), timing.add_time("inner")
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.__exit__(None, None, None)


def test_merge_sums_add_time_and_averages_the_others() -> None:
    a, b = _loop(Timing("w0"), 2), _loop(Timing("w1"), 3)
    with b.add_time("only_b"):
        pass
    merged = Timing.merge(a, b)
    da, db, dm = a.to_dict(), b.to_dict(), merged.to_dict()
    assert merged.name == "w0" and list(dm)[-1] == "only_b"
    for key in ("collect", "collect/env", "train/loss", "train/optim"):  # add_time
        assert dm[key] == pytest.approx(da[key] + db[key])
    for key in ("log", "train/loss/forward", "collect/policy"):  # timeit, time_avg
        assert dm[key] == pytest.approx((da[key] + db[key]) / 2)
    assert dm["only_b"] == db["only_b"]
    assert merged.count("collect/env") == 5
    assert a.to_dict() == da  # inputs unchanged


def test_merge_errors() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Timing.merge()
    with pytest.raises(TypeError, match="expected Timing objects, got dict"):
        Timing.merge(Timing(), {})  # type: ignore[arg-type]
    a, b = Timing(), Timing()
    with a.add_time("x"):
        pass
    with b.timeit("x"):
        pass
    with pytest.raises(ValueError, match=r"key 'x' timed as \['add_time', 'timeit'\]"):
        Timing.merge(a, b)


def test_pickles_and_keeps_timing_after_unpickling() -> None:
    timing = _loop(Timing("worker 3"))
    with timing.add_time("open"):  # pickled from inside a block: the copy starts at the root
        copy = pickle.loads(pickle.dumps(timing))
    assert copy.name == "worker 3"
    assert {k: v for k, v in copy.to_dict().items() if k != "open"} == {
        k: v for k, v in timing.to_dict().items() if k != "open"
    }
    with copy.add_time("collect"), copy.add_time("env"):
        pass
    assert copy.count("collect/env") == 3
    merged = Timing.merge(timing, copy)
    assert merged.count("collect/env") == 5


def test_reset() -> None:
    timing = _loop(Timing())
    timing.reset()
    assert timing.to_dict() == {}
    with timing.add_time("a"), pytest.raises(RuntimeError, match="inside an open block"):
        timing.reset()


def test_add_credits_a_measured_duration_under_the_open_block() -> None:
    timing = Timing()
    with timing.add_time("rollout"):
        timing.add("env", 0.25, count=10)
        timing.add("env", 0.5, count=10)
    assert timing["rollout/env"] == 0.75 and timing.count("rollout/env") == 20
    assert timing["rollout"] < 0.25  # the outer block's own clock is untouched
    with pytest.raises(ValueError, match="'rollout' was timed with add_time, now with timeit"):
        timing.timeit("rollout").__enter__()
    with timing.timeit("last"):
        pass
    with pytest.raises(ValueError, match="'last' was timed with timeit, now with add_time"):
        timing.add("last", 1.0)
    with pytest.raises(ValueError, match="non-empty str without '/'"):
        timing.add("a/b", 1.0)
