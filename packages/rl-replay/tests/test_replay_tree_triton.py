"""The Triton priority tree equals the torch tree, run with Triton's CPU interpreter.

``TRITON_INTERPRET=1`` is read when the kernels are wrapped with ``triton.jit``, which
rl_replay does lazily and per interpreter setting, so setting the variable with
``monkeypatch`` before the first call is enough. Sizes are small: the interpreter runs
every block operation in numpy.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from rl_replay import (
    PriorityTree,
    TritonPriorityTree,
    triton_tree_available,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="needs the [cuda] extra (triton)"
)


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _random_updates(trees, capacity, seed, rounds=3, batch=40):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(rounds):
        index = torch.randint(capacity, (batch,), generator=gen)  # with duplicates
        value = torch.rand(batch, generator=gen, dtype=torch.float64) * 10
        value[::5] = 0.0  # written zeros: never sampled, but count for the min
        for tree in trees:
            tree.update(index, value)
    return gen


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("capacity", "fanout", "top_size"),
    [(50, 32, 4096), (300, 4, 8), (513, 5, 7)],
)
def test_triton_tree_equals_the_torch_tree(interpret, capacity, fanout, top_size):
    ref = PriorityTree(capacity, fanout=fanout, top_size=top_size)
    tree = TritonPriorityTree(capacity, fanout=fanout, top_size=top_size)
    assert tree.depth == ref.depth
    gen = _random_updates([ref, tree], capacity, seed=capacity)
    assert torch.equal(tree.leaves, ref.leaves)
    for got, want in zip(tree._sums, ref._sums, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(tree._mins, ref._mins, strict=True):
        assert torch.equal(got, want)
    assert tree.min() == ref.min()
    assert tree.total() == pytest.approx(ref.total(), rel=1e-12)
    u = torch.rand(128, generator=gen, dtype=torch.float64)
    u[:2] = torch.tensor([0.0, 1.0 - 2.0**-53], dtype=torch.float64)  # both ends
    got, want = tree.sample(u), ref.sample(u)
    assert (tree.leaves[got] > 0).all()
    assert (got == want).float().mean() > 0.98  # equal up to float ties in the sums


@pytest.mark.timeout(120)
def test_triton_tree_sampling_frequencies_follow_the_leaves(interpret):
    tree = TritonPriorityTree(64, fanout=4, top_size=4)
    value = torch.arange(64, dtype=torch.float64) % 4  # leaves 0, 4, 8, ... are zero
    tree.update(torch.arange(64), value)
    u = torch.rand(512, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    draws = tree.sample(u)
    counts = torch.bincount(draws, minlength=64).double()
    assert counts[value == 0].sum() == 0
    expected = value / value.sum() * len(draws)
    assert ((counts - expected).abs() <= 5 * expected.sqrt() + 1).all()


def test_triton_tree_refuses_cpu_tensors_without_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not triton_tree_available("cpu")
    with pytest.raises(RuntimeError, match="device"):
        TritonPriorityTree(10)
