"""The numba priority tree (its equality with the torch tree is tested with the tree's
other property tests, in test_replay_prioritized.py), and the automatic tree choice."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    LazyTensorStorage,
    NumbaPriorityTree,
    PrioritizedSampler,
    PriorityTree,
    ReplayBuffer,
    make_priority_tree,
)
from rl_replay._tree_numba_kernels import BAD_INDEX, BAD_PRIORITY, UNWRITTEN


def test_numba_draws_follow_the_leaves():
    tree = NumbaPriorityTree(1000)
    p = torch.rand(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    p[::3] = 0.0
    tree.update(torch.arange(1000), p)
    u = torch.rand(200_000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    counts = torch.bincount(tree.sample(u), minlength=1000).double()
    expected = p / p.sum() * len(u)
    assert counts[::3].sum() == 0
    chi2 = ((counts - expected) ** 2 / expected.clamp(min=1e-12))[p > 0].sum()
    assert chi2 < 666 * 1.2  # 666 degrees of freedom


def test_weights_are_computed_with_the_draws():
    tree = NumbaPriorityTree(50)
    p = torch.linspace(0.5, 5.0, 50, dtype=torch.float64)
    tree.update(torch.arange(50), p)
    index, weight = tree.sample_weighted(torch.rand(64, dtype=torch.float64), beta=0.4)
    assert weight.dtype == torch.float32
    torch.testing.assert_close(weight.double(), (p[index] / 0.5) ** -0.4, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    ("priority", "index", "status"),
    [
        ([1.0, -1.0], [0, 1], BAD_PRIORITY),
        ([1.0, float("nan")], [0, 1], BAD_PRIORITY),
        ([float("inf"), 1.0], [0, 1], BAD_PRIORITY),
        ([1.0, 2.0], [0, 10], BAD_INDEX),
        ([1.0, 2.0], [-1, 3], BAD_INDEX),
    ],
)
def test_set_priorities_writes_nothing_when_one_is_bad(priority, index, status):
    tree = NumbaPriorityTree(10)
    tree.update(torch.arange(10), torch.arange(1.0, 11.0, dtype=torch.float64))
    sums, mins = tree._sum_buf.clone(), tree._min_buf.clone()
    got, _ = tree.set_priorities(torch.tensor(index), torch.tensor(priority), 1e-6, 0.5)
    assert got == status
    assert torch.equal(tree._sum_buf, sums) and torch.equal(tree._min_buf, mins)


def test_set_priorities_applies_eps_and_alpha():
    tree = NumbaPriorityTree(10)
    tree.update(torch.tensor([2, 7]), torch.ones(2, dtype=torch.float64))  # rows holding data
    status, high = tree.set_priorities(torch.tensor([2, 7]), torch.tensor([3.0, 8.0]), 1.0, 0.5)
    assert (status, high) == (0, 8.0)
    assert tree.leaves[[2, 7]].tolist() == [2.0, 3.0]
    assert tree.total() == 5.0 and tree.min() == 2.0


def test_set_priorities_refuses_unwritten_leaves_and_writes_nothing():
    tree = NumbaPriorityTree(10)
    tree.update(torch.arange(5), torch.ones(5, dtype=torch.float64))
    sums, mins = tree._sum_buf.clone(), tree._min_buf.clone()
    got, _ = tree.set_priorities(torch.tensor([0, 4, 5]), torch.ones(3), 0.0, 1.0)
    assert got == UNWRITTEN
    assert torch.equal(tree._sum_buf, sums) and torch.equal(tree._min_buf, mins)
    trusted, _ = tree.set_priorities(torch.tensor([0, 4]), torch.ones(2), 0.0, 1.0, False)
    assert trusted == 0


def test_state_loads_across_tree_kinds():
    torch_tree = PriorityTree(1000)
    torch_tree.update(
        torch.tensor([3, 500, 999]), torch.tensor([2.0, 0.0, 5.0], dtype=torch.float64)
    )
    numba_tree = NumbaPriorityTree(1000)
    numba_tree.load_state_dict(torch_tree.state_dict())
    assert numba_tree.total() == 7.0 and numba_tree.min() == 0.0
    back = PriorityTree(1000)
    back.load_state_dict(numba_tree.state_dict())
    assert torch.equal(back.leaves, torch_tree.leaves) and back.min() == 0.0
    with pytest.raises(ValueError, match="capacity 1000"):
        PriorityTree(999).load_state_dict(numba_tree.state_dict())


def test_the_tree_choice(monkeypatch):
    assert type(make_priority_tree(100)) is NumbaPriorityTree
    assert type(make_priority_tree(100, kind="torch")) is PriorityTree
    monkeypatch.setenv("RL_REPLAY_TREE", "torch")
    assert type(make_priority_tree(100)) is PriorityTree
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, 1.0, 1.0))
    rb.extend(torch.arange(8))
    assert type(rb.sampler.tree) is PriorityTree
    with pytest.raises(ValueError, match="kind .RL_REPLAY_TREE.: expected one of"):
        make_priority_tree(100, kind="cython")
    with pytest.raises(ValueError, match="device: NumbaPriorityTree runs on the CPU"):
        NumbaPriorityTree(10, device="meta")


def test_narrow_dtypes_go_to_the_kernels_as_they_are():
    wide, narrow = NumbaPriorityTree(100), NumbaPriorityTree(100)
    index, priority = torch.tensor([5, 50, 99]), torch.tensor([0.5, 2.0, 7.0])
    wide.set_priorities(index, priority.double(), 1e-3, 0.7)
    narrow.set_priorities(index.int(), priority, 1e-3, 0.7)  # int32 and float32
    torch.testing.assert_close(narrow.leaves, wide.leaves, rtol=1e-7, atol=0)
    narrow.update(index.int(), priority.bfloat16())  # converted: numpy has no bfloat16
    assert narrow.leaves[[5, 50, 99]].tolist() == [0.5, 2.0, 7.0]
