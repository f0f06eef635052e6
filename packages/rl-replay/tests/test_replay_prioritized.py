"""Prioritized sampling: frequencies, weights, the tree, bad priorities."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_replay import (
    InvalidPriorityError,
    LazyTensorStorage,
    NumbaPriorityTree,
    PrioritizedSampler,
    PriorityTree,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
)
from tensordict import TensorDict

# chi-square critical value for 9 degrees of freedom at p = 0.001
_CHI2_9_0001 = 27.877


def test_sampling_frequencies_are_proportional_to_p_alpha():
    torch.manual_seed(0)
    alpha = 0.7
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        sampler=PrioritizedSampler(10, alpha, 1.0),
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(torch.arange(10))
    priority = torch.arange(1.0, 11.0)
    rb.update_priorities(torch.arange(10), priority)
    draws = torch.cat([rb.sample(5000) for _ in range(20)])
    observed = torch.bincount(draws, minlength=10).double()
    q = priority.double() ** alpha
    expected = q / q.sum() * len(draws)
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < _CHI2_9_0001


def test_importance_weights_are_normalised_by_the_min_priority():
    beta, alpha = 0.4, 0.6
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, alpha, beta))
    rb.extend(torch.arange(8))
    priority = torch.tensor([0.5, 1, 2, 3, 4, 5, 6, 7.0])
    rb.update_priority(torch.arange(8), priority)
    index, info = rb.sample(256, return_info=True)
    q = (priority.double() + 1e-8) ** alpha
    expected = (q[index] / q.min()) ** -beta
    torch.testing.assert_close(info["priority_weight"].double(), expected, rtol=1e-5, atol=0)
    assert info["priority_weight"].max() <= 1.0


# batches of (index, priority) updates, duplicate indices and zeros included
_UPDATES = st.lists(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.one_of(st.just(0.0), st.floats(1e-3, 100.0))),
        min_size=1,
        max_size=20,
    ),
    min_size=1,
    max_size=6,
)


def _tree_shapes(capacity: int, fanout: int, top: int) -> dict:
    """Strategies for a tree's ``capacity``, ``fanout`` and ``top`` (up to the bounds
    given) and for its ``updates``."""
    return {
        "capacity": st.integers(1, capacity),
        "fanout": st.integers(2, fanout),
        "top": st.integers(1, top),
        "updates": _UPDATES,
    }


def _deduplicated(updates, capacity):
    """Each batch of ``updates`` as ``(index, value)`` tensors with one value per index
    (the last one wins), so a reference is defined."""
    for batch in updates:
        index, first = _unique_last(torch.tensor([i % capacity for i, _ in batch]))
        yield index, torch.tensor([v for _, v in batch], dtype=torch.float64)[first]


@settings(max_examples=30, deadline=None)
@given(**_tree_shapes(capacity=300, fanout=8, top=16))
def test_tree_matches_brute_force_cumsum(capacity, fanout, top, updates):
    tree = PriorityTree(capacity, fanout=fanout, top_size=top)
    ref = torch.zeros(capacity, dtype=torch.float64)
    written = torch.zeros(capacity, dtype=torch.bool)
    for index, value in _deduplicated(updates, capacity):
        tree.update(index, value)
        ref[index] = value
        written[index] = True
    assert tree.total() == pytest.approx(float(ref.sum()), rel=1e-9, abs=1e-9)
    assert tree.min() == float(ref[written].min())  # the min is over written leaves
    if ref.sum() > 0:
        u = torch.rand(64, dtype=torch.float64)
        got = tree.sample(u)
        cum = ref.cumsum(0)
        expect = torch.searchsorted(cum, u * cum[-1], right=True)
        # equal up to float ties; always a positive leaf
        assert (ref[got] > 0).all()
        assert (got == expect).float().mean() > 0.9


@settings(max_examples=40, deadline=None)
@given(**_tree_shapes(capacity=700, fanout=9, top=70))
def test_numba_tree_equals_the_torch_tree(capacity, fanout, top, updates):
    ref = PriorityTree(capacity)
    tree = NumbaPriorityTree(capacity, fanout=fanout, top_size=top)
    for index, value in _deduplicated(updates, capacity):
        ref.update(index, value)
        tree.update(index, value)
    assert torch.equal(tree.leaves, ref.leaves)
    assert tree.total() == pytest.approx(ref.total(), rel=1e-12, abs=1e-12)
    assert tree.min() == ref.min()
    if ref.total() > 0:
        u = torch.rand(256, dtype=torch.float64)
        got, want = tree.sample(u), ref.sample(u)
        assert (tree.leaves[got] > 0).all()  # a zero leaf is never drawn
        assert (got == want).float().mean() > 0.95  # equal up to float ties


def _unique_last(index):
    seen = {}
    for pos, i in enumerate(index.tolist()):
        seen[i] = pos
    return torch.tensor(list(seen)), torch.tensor(list(seen.values()))


@pytest.mark.parametrize("kind", ["numba", "torch"])
@pytest.mark.parametrize("priority", [-1.0, float("nan"), float("inf")])
def test_bad_priorities_leave_the_tree_unchanged(priority, kind, monkeypatch):
    monkeypatch.setenv("RL_REPLAY_TREE", kind)
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, 1.0, 1.0))
    rb.extend(torch.arange(8))
    rb.update_priority(torch.arange(8), torch.arange(1.0, 9.0))
    before = rb.sampler.tree.leaves.clone()
    with pytest.raises(InvalidPriorityError, match="priority"):
        rb.update_priority(torch.tensor([0, 1]), torch.tensor([2.0, priority]))
    with pytest.raises(InvalidPriorityError, match="index"):
        rb.update_priority(torch.tensor([0, 99]), torch.tensor([2.0, 2.0]))
    assert torch.equal(rb.sampler.tree.leaves, before)


def test_new_rows_get_the_max_priority():
    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=PrioritizedSampler(8, 1.0, 1.0))
    rb.extend(torch.arange(4))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 2.0, 9.0, 3.0]))
    rb.extend(torch.arange(2))
    assert rb.sampler.tree.leaves[4:6].tolist() == pytest.approx([9.0, 9.0])


def test_td_prioritized_buffer_reads_td_error():
    torch.manual_seed(0)
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, storage=LazyTensorStorage(64), batch_size=32
    )
    rb.extend(TensorDict({"obs": torch.arange(64.0).unsqueeze(1)}, [64]))
    td = rb.sample()
    assert td["priority_weight"].shape == (32,)
    td["td_error"] = torch.where(td["index"] == td["index"][0], 1e4, 1e-6).unsqueeze(1)
    rb.update_tensordict_priority(td)
    hot = td["index"][0]
    assert (rb.sample()["index"] == hot).float().mean() > 0.9
    with pytest.raises(KeyError, match="td_error"):
        rb.update_tensordict_priority(td.exclude("td_error"))


def test_a_sampled_index_changed_in_place_is_checked_again():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(16), batch_size=4
    )
    rb.extend(TensorDict({"obs": torch.zeros(16, 1)}, [16]))
    td = rb.sample()
    rb.update_priority(td["index"], torch.ones(4))  # the sampler's own indices
    before = rb.sampler.tree.leaves.clone()
    td = rb.sample()
    index = td["index"]
    index.view(-1)[0] = 99  # same tensor, new version: no longer trusted
    with pytest.raises(InvalidPriorityError, match="index"):
        rb.update_priority(index, torch.ones(4))
    with pytest.raises(InvalidPriorityError, match="index"):
        rb.update_priority(torch.tensor([0, -1]), torch.ones(2))
    assert torch.equal(rb.sampler.tree.leaves, before)


def test_tree_state_round_trip_keeps_written_zeros_for_the_min():
    tree = PriorityTree(100, fanout=4, top_size=4)
    tree.update(torch.tensor([3, 50, 77]), torch.tensor([2.0, 0.0, 5.0], dtype=torch.float64))
    other = PriorityTree(100, fanout=4, top_size=4)
    other.load_state_dict(tree.state_dict())
    assert other.min() == 0.0 and other.total() == 7.0
    u = torch.linspace(0, 0.99, 50, dtype=torch.float64)
    assert torch.equal(other.sample(u), tree.sample(u))
    assert set(tree.sample(u).tolist()) == {3, 77}


def test_a_restored_sampler_draws_what_the_original_would_have():
    def make():
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=0.6, beta=0.4, storage=LazyTensorStorage(500), batch_size=8,
            generator=torch.Generator().manual_seed(3),
        )  # fmt: skip
        rb.extend(TensorDict({"obs": torch.arange(500.0)}, [500]))
        rb.update_priority(
            torch.arange(500), torch.rand(500, generator=torch.Generator().manual_seed(4))
        )
        return rb

    rb = make()
    for _ in range(3):  # part-way through a pool of draws
        rb.sample()
    restored = make()
    restored.sampler.load_state_dict(rb.sampler.state_dict())
    restored._generator.set_state(rb._generator.get_state())
    for _ in range(2 * PrioritizedSampler.POOL):  # past the end of the pool, into the next
        assert torch.equal(restored.sample()["index"], rb.sample()["index"])


def test_a_held_sample_is_not_overwritten_by_later_ones():
    tree = NumbaPriorityTree(1000)
    tree.update(torch.arange(1000), torch.rand(1000, dtype=torch.float64))
    index, weight = tree.sample_weighted(torch.rand(64, dtype=torch.float64), 0.5)
    kept = index.clone(), weight.clone()
    for _ in range(3 * NumbaPriorityTree.OUTPUT_POOL):
        tree.sample_weighted(torch.rand(64, dtype=torch.float64), 0.5)
        tree.sample_weighted(torch.rand(32, dtype=torch.float64), 0.5)  # another size too
    assert torch.equal(index, kept[0]) and torch.equal(weight, kept[1])
