"""A priority update only reaches rows that hold data, and is all or nothing (issue 26).

An index that holds no data (never written, dropped by ``empty()``, or not in the state a
``loads`` restored) must raise, naming the index and the buffer's length, and leave the
sum/min tree exactly as it was, for the whole batch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_replay import (
    InvalidPriorityError,
    LazyTensorStorage,
    PrioritizedSampler,
    ReplayBuffer,
)

KINDS = ["numba", "torch"] + (["triton"] if importlib.util.find_spec("triton") else [])


@pytest.fixture(params=KINDS)
def tree_kind(request, monkeypatch):
    monkeypatch.setenv("RL_REPLAY_TREE", request.param)
    if request.param == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    return request.param


def _buffer(capacity=100, rows=10, alpha=1.0):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=PrioritizedSampler(capacity, alpha=alpha, beta=1.0),
        generator=torch.Generator().manual_seed(0),
    )
    if rows:
        rb.extend(torch.arange(rows))
    return rb


def _tree_state(rb):
    tree = rb.sampler.tree
    return tree._sum_buf.clone(), tree._min_buf.clone(), float(rb.sampler._max_priority)


def _assert_unchanged(rb, before):
    sums, mins, max_priority = _tree_state(rb)
    assert torch.equal(sums, before[0]) and torch.equal(mins, before[1])
    assert max_priority == before[2]


def test_the_issue_measurement_unwritten_row_is_refused_and_never_drawn(tree_kind):
    rb = _buffer(capacity=100, rows=10)
    before = _tree_state(rb)
    with pytest.raises(InvalidPriorityError, match=r"index 57 .*holds 10 rows"):
        rb.update_priority(torch.tensor([57]), torch.tensor([1000.0]))
    _assert_unchanged(rb, before)
    draws = torch.cat([rb.sample(32, return_info=True)[1]["index"] for _ in range(100)])
    assert int(draws.max()) < 10  # before the fix: most of 3,200 draws returned row 57


def test_one_unwritten_index_rejects_the_whole_batch(tree_kind):
    rb = _buffer(capacity=64, rows=20)
    rb.update_priority(torch.arange(20), torch.arange(1.0, 21.0))
    before = _tree_state(rb)
    index = torch.tensor([0, 5, 19, 33, 7])  # 33 was never written
    with pytest.raises(InvalidPriorityError, match=r"index 33 \(1 of 5 indices"):
        rb.update_priority(index, torch.full((5,), 500.0))
    _assert_unchanged(rb, before)


def test_stale_indices_after_empty_are_refused(tree_kind):
    rb = _buffer(capacity=32, rows=32)
    index = rb.sample(8, return_info=True)[1]["index"]  # the sampler's own (trusted) tensor
    rb.empty()
    rb.extend(torch.arange(4))  # rows 0..3 hold data again; the sample's others do not
    stale = index[index >= 4]
    assert stale.numel(), "the sample should hold rows past the first 4"
    before = _tree_state(rb)
    with pytest.raises(InvalidPriorityError, match=r"holds 4 rows"):
        rb.update_priority(index, torch.full(index.shape, 1e3))
    _assert_unchanged(rb, before)


def test_indices_from_before_a_loads_are_refused(tree_kind, tmp_path):
    small = _buffer(capacity=50, rows=5)
    small.dumps(tmp_path / "ckpt")
    rb = _buffer(capacity=50, rows=50)
    index = rb.sample(16, return_info=True)[1]["index"]
    rb.loads(tmp_path / "ckpt")
    assert len(rb) == 5
    before = _tree_state(rb)
    if bool((index >= 5).any()):
        with pytest.raises(InvalidPriorityError, match=r"holds 5 rows"):
            rb.update_priority(index, torch.ones(index.shape))
    _assert_unchanged(rb, before)
    rb.update_priority(torch.arange(5), torch.ones(5))  # rows the state holds are fine


def test_zero_priority_rows_still_hold_data(tree_kind):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0)
    )
    rb.extend(torch.arange(4))
    rb.update_priority(torch.arange(4), torch.zeros(4))  # written zeros: held, never drawn
    rb.update_priority(torch.arange(4), torch.ones(4))


@settings(max_examples=40, deadline=None)
@given(
    written=st.lists(st.integers(0, 99), min_size=1, max_size=60),
    batch=st.lists(st.integers(0, 99), min_size=1, max_size=40),
    kind=st.sampled_from(["numba", "torch"]),
)
def test_a_rejected_batch_leaves_the_tree_bitwise_unchanged(written, batch, kind):
    """Property: any batch either is fully applied (all rows held) or changes nothing."""
    from rl_replay._tree_choice import make_priority_tree

    sampler = PrioritizedSampler(100, alpha=0.6, beta=0.4)
    sampler._tree = make_priority_tree(100, kind=kind)
    sampler.extend(torch.tensor(written))
    rb_state = (sampler.tree._sum_buf.clone(), sampler.tree._min_buf.clone())
    index = torch.tensor(batch)
    priority = torch.linspace(0.5, 9.0, len(batch))
    held = set(written)
    if set(batch) <= held:
        sampler.update_priority(index, priority)
        assert set(torch.nonzero(sampler.tree.leaves).flatten().tolist()) == held
    else:
        first_bad = next(i for i in batch if i not in held)
        with pytest.raises(InvalidPriorityError, match=rf"index {first_bad} "):
            sampler.update_priority(index, priority)
        assert torch.equal(sampler.tree._sum_buf, rb_state[0])
        assert torch.equal(sampler.tree._min_buf, rb_state[1])


def _python_calls(fn):
    """Python-level function calls made while running ``fn`` (C calls not counted)."""
    calls = [0]

    def profile(frame, event, arg):
        if event == "call":
            calls[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls[0]


@pytest.mark.parametrize("kind", ["numba", "torch"])
def test_the_check_has_no_python_loop_per_index(kind, monkeypatch):
    """The same number of Python calls for 16 and 16,384 indices, accepted or refused."""
    monkeypatch.setenv("RL_REPLAY_TREE", kind)
    rb = _buffer(capacity=1 << 15, rows=1 << 14)

    def update(n, bad):
        index = torch.randperm(1 << 14)[:n]
        if bad:
            index[n // 2] = (1 << 14) + 3
        with contextlib.suppress(InvalidPriorityError):
            rb.update_priority(index, torch.rand(n))

    update(16, False), update(16, True)  # warm-up: numba compiles, caches fill
    for bad in (False, True):
        assert _python_calls(lambda b=bad: update(16, b)) == _python_calls(
            lambda b=bad: update(1 << 14, b)
        )


def test_compilable_buffer_asserts_on_unwritten_rows():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(16),
        sampler=PrioritizedSampler(16, alpha=1.0, beta=1.0),
        compilable=True,
    )
    rb.extend(torch.arange(4))
    leaves = rb.sampler.tree.leaves.clone()
    with pytest.raises(RuntimeError, match="index: expected rows that hold data"):
        rb.update_priority(torch.tensor([1, 9]), torch.ones(2))
    assert torch.equal(rb.sampler.tree.leaves, leaves)
