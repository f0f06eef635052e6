"""``compilable=True``: extend, sample and priority updates under torch.compile(fullgraph=True).

Backends "eager" (dynamo tracing alone) and "aot_eager" (dynamo + AOTAutograd, where
in-place state updates are functionalised), not inductor: its C++ toolchain set-up costs
40-60 s per process on this machine; ``benchmarks/bench_replay_compile.py`` runs it.
With these backends the random ops run as in eager mode, so a compiled step and an
eager step from the same ``torch.manual_seed`` give identical samples.
"""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    CompressedStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    PriorityTree,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict
from torch._dynamo.utils import counters

BACKENDS = ["eager", "aot_eager"]
CAPACITY, BLOCK, BATCH, STEPS = 64, 24, 16, 6  # the cursor wraps around twice


def _blocks(seed: int, steps: int = STEPS, ndim: int = 1) -> list[TensorDict]:
    gen = torch.Generator().manual_seed(seed)
    lead = (BLOCK,) if ndim == 1 else (2, BLOCK // 2)
    return [
        TensorDict(
            {
                "obs": torch.randn(*lead, 4, generator=gen),
                "reward": torch.randn(*lead, generator=gen),
                "done": torch.rand(*lead, generator=gen) < 0.1,
                "next": {"obs": torch.randn(*lead, 4, generator=gen)},  # a nested key
            },
            lead,
        )
        for _ in range(steps)
    ]


def _buffer(kind: str, ndim: int = 1) -> TensorDictReplayBuffer:
    storage = LazyTensorStorage(CAPACITY, ndim=ndim)
    if kind == "prioritized":
        return TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=storage, batch_size=BATCH, compilable=True
        )
    return TensorDictReplayBuffer(storage=storage, batch_size=BATCH, compilable=True)


def _step(rb: TensorDictReplayBuffer, data: TensorDict) -> TensorDict:
    """One training-loop step of the buffer: write a block, sample, update priorities."""
    rb.extend(data)
    td = rb.sample()
    if isinstance(rb, TensorDictPrioritizedReplayBuffer):
        td["td_error"] = td["reward"].abs() + td["obs"].norm(dim=-1)
        rb.update_tensordict_priority(td)
    return td


def _run(kind: str, backend: str | None, ndim: int = 1) -> tuple:
    """Samples and final state of STEPS steps (eager when ``backend`` is None)."""
    blocks = _blocks(0, ndim=ndim)
    rb = _buffer(kind, ndim)
    rb.extend(blocks[0])  # the first write allocates the storage: done eagerly
    step = _step if backend is None else torch.compile(_step, fullgraph=True, backend=backend)
    torch.manual_seed(1)
    samples = [step(rb, data) for data in blocks[1:]]
    return samples, rb


def _state(rb: TensorDictReplayBuffer) -> dict:
    state = rb.state_dict()
    return {
        "leaves": state["storage"]["leaves"],
        "filled": state["storage"]["filled"],
        "cursor": state["writer"]["cursor"],
        "sampler": state["sampler"],
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_compiled_step_matches_eager_without_graph_break(kind, backend):
    torch._dynamo.reset()
    counters.clear()
    compiled, rb_compiled = _run(kind, backend)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1  # no recompile as the cursor moves
    eager, rb_eager = _run(kind, None)
    for got, want in zip(compiled, eager, strict=True):
        assert set(got.keys(True)) == set(want.keys(True)) and ("next", "obs") in got.keys(True)
        torch.testing.assert_close(got.to_dict(), want.to_dict(), rtol=0, atol=0)
    torch.testing.assert_close(_state(rb_compiled), _state(rb_eager), rtol=0, atol=0)
    assert len(rb_compiled) == CAPACITY


@pytest.mark.parametrize("kind", ["uniform", "prioritized"])
def test_compiled_ndim2_storage_matches_eager(kind):
    torch._dynamo.reset()
    counters.clear()
    compiled, rb_compiled = _run(kind, "eager", ndim=2)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    eager, _ = _run(kind, None, ndim=2)
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got["index"], want["index"])
        assert torch.equal(got["obs"], want["obs"])
    assert rb_compiled.sample()["obs"].shape == (BATCH, 4)


def test_compilable_tensor_buffer_first_extend_inside_compile():
    torch._dynamo.reset()
    counters.clear()
    rb = ReplayBuffer(batch_size=8, compilable=True)  # LazyTensorStorage(1000) by default
    assert isinstance(rb.storage, LazyTensorStorage) and rb.storage.compilable

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(x):
        index = rb.extend(x)
        return index, rb.sample()

    for i in range(3):
        index, sample = step(torch.arange(10.0) + 10 * i)
    assert sum(counters["graph_break"].values()) == 0
    assert index.tolist() == list(range(20, 30)) and len(rb) == 30
    assert sample.shape == (8,) and bool((sample < 30).all())
    assert torch.equal(rb.storage.get(torch.arange(30)), torch.arange(30.0))


def test_compilable_prioritized_uses_torch_tree_and_follows_priorities():
    torch.manual_seed(0)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=PrioritizedSampler(100, alpha=1.0, beta=1.0),
        compilable=True,
    )
    assert type(rb.sampler.tree) is PriorityTree  # not numba, the CPU default
    rb.extend(torch.arange(100))
    rb.update_priority(torch.arange(100), torch.where(torch.arange(100) == 7, 1e3, 1e-3))
    data, info = rb.sample(256, return_info=True)
    assert (data == 7).float().mean() > 0.9
    weight = info["priority_weight"]
    torch.testing.assert_close(weight[data == 7], torch.full_like(weight[data == 7], 1e-6))
    assert float(rb.sampler.state_dict()["max_priority"]) == 1e3
    assert rb.state_dict()["rng"] is None


def test_compilable_uniform_ranks_cover_only_stored_rows():
    torch.manual_seed(0)
    rb = ReplayBuffer(storage=LazyTensorStorage(1000), compilable=True)
    rb.extend(torch.arange(10))
    draws = rb.sample(20_000)
    counts = torch.bincount(draws, minlength=10)
    assert counts.numel() == 10
    chi2 = float(((counts - 2000.0) ** 2 / 2000.0).sum())
    assert chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_checks_raise_and_leave_the_tree_unchanged(backend):
    torch._dynamo.reset()
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(16), batch_size=4, compilable=True
    )
    rb.extend(TensorDict({"obs": torch.zeros(8)}, [8]))
    update = torch.compile(rb.update_priority, fullgraph=True, backend=backend)
    update(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    leaves = rb.sampler.tree.leaves.clone()
    for index, priority in (
        (torch.arange(4), torch.tensor([1.0, -1.0, 2.0, 3.0])),
        (torch.arange(4), torch.tensor([1.0, float("nan"), 2.0, 3.0])),
        (torch.tensor([0, 1, 2, 16]), torch.ones(4)),
    ):
        with pytest.raises(RuntimeError, match="priority: expected finite|index: expected"):
            update(index, priority)
        assert torch.equal(rb.sampler.tree.leaves, leaves)
    assert float(rb.sampler.state_dict()["max_priority"]) == 4.0
    rb.empty()
    with pytest.raises(RuntimeError, match="the buffer is empty"):
        torch.compile(rb.sample, fullgraph=True, backend=backend)()


def test_compilable_checkpoint_round_trip(tmp_path):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(32), batch_size=4, compilable=True
    )
    for data in _blocks(3, steps=2):
        rb.extend(data)
    rb.update_priority(torch.arange(5), torch.arange(5.0) * 2)
    rb.dumps(tmp_path / "ckpt")
    other = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(32), batch_size=4, compilable=True
    )
    other.loads(tmp_path / "ckpt")
    torch.testing.assert_close(_state(other), _state(rb), rtol=0, atol=0)
    assert isinstance(other.writer._cursor, torch.Tensor) and int(other.writer._cursor) == 16
    assert isinstance(other.storage.count(), torch.Tensor) and len(other) == 32
    other.empty()
    assert len(other) == 0 and int(other.writer._cursor) == 0


def test_compilable_block_larger_than_capacity_keeps_the_tail():
    rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=RoundRobinWriter(), compilable=True)
    assert rb.extend(torch.arange(6)).tolist() == [2, 3, 0, 1]
    assert rb.storage.get(torch.arange(4)).tolist() == [4, 5, 2, 3]
    assert rb.extend(torch.arange(3) + 10).tolist() == [2, 3, 0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"storage": ListStorage(10)}, "storage: expected a LazyTensorStorage"),
        ({"storage": LazyMemmapStorage(10)}, "storage: expected a LazyTensorStorage"),
        ({"storage": CompressedStorage(10)}, "storage: expected a LazyTensorStorage"),
        ({"sampler": SamplerWithoutReplacement()}, "sampler: expected a RandomSampler"),
        ({"sampler": SliceSampler(num_slices=2, end_key="done")}, "sampler: expected"),
        ({"writer": TensorDictMaxValueWriter()}, "writer: expected a RoundRobinWriter"),
        ({"generator": torch.Generator()}, "generator: a compilable buffer"),
        ({"prefetch": 2, "batch_size": 4}, "prefetch: a compilable buffer"),
        ({"compilable": 1}, "compilable: expected a bool"),
    ],
)
def test_compilable_refuses_what_cannot_be_traced(kwargs, match):
    kwargs = {"compilable": True, **kwargs}
    with pytest.raises(ValueError, match=match):
        ReplayBuffer(**kwargs)


def test_compilable_storage_needs_a_compilable_buffer():
    with pytest.raises(ValueError, match="compilable: expected True with a compilable storage"):
        ReplayBuffer(storage=LazyTensorStorage(10, compilable=True), sampler=RandomSampler())
    rb = ReplayBuffer(storage=LazyTensorStorage(10, compilable=True), compilable=True)
    rb.extend(torch.arange(3))
    assert int(rb.storage.count()) == 3 and rb.add(torch.tensor(7)) == 3
    with pytest.raises(ValueError, match="count: expected a compilable storage"):
        LazyTensorStorage(10).count()
