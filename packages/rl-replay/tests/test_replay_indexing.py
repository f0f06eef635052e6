"""``rb[index]``: TorchRL's indexing of a replay buffer returns the stored rows."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    CompressedStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict


def _rows(n: int) -> TensorDict:
    return TensorDict({"obs": torch.arange(n).float().unsqueeze(-1), "r": torch.arange(n)}, [n])


@pytest.fixture(params=["lazy", "memmap", "compressed"])
def td_buffer(request, tmp_path):
    storage = {"lazy": lambda: LazyTensorStorage(50),
               "memmap": lambda: LazyMemmapStorage(50, scratch_dir=tmp_path),
               "compressed": lambda: CompressedStorage(50)}[request.param]()
    rb = TensorDictReplayBuffer(storage=storage, batch_size=4)
    rb.extend(_rows(20))
    return rb


def test_slice_int_and_tensor_return_the_stored_rows(td_buffer):
    assert td_buffer[:10]["r"].tolist() == list(range(10))
    assert td_buffer[3]["r"].item() == 3 and td_buffer[3].batch_size == ()
    assert td_buffer[-1]["r"].item() == 19
    assert td_buffer[torch.tensor([5, 0, 19])]["r"].tolist() == [5, 0, 19]
    assert td_buffer[[2, 4]]["obs"].squeeze(-1).tolist() == [2.0, 4.0]
    assert td_buffer[torch.tensor(7)]["r"].item() == 7
    assert "index" not in td_buffer[:2].keys()  # noqa: SIM118 (a TensorDict has no __contains__)


def test_slice_stops_at_len_like_a_list(td_buffer):
    assert td_buffer[15:100]["r"].tolist() == [15, 16, 17, 18, 19]


@pytest.mark.parametrize("index", [20, -21, [0, 20], torch.tensor([3, 25])])
def test_beyond_len_is_an_index_error_with_the_position(td_buffer, index):
    with pytest.raises(IndexError, match=r"out of range for a buffer of 20 rows"):
        td_buffer[index]


def test_float_positions_are_a_type_error(td_buffer):
    with pytest.raises(TypeError, match="index"):
        td_buffer[torch.tensor([0.5])]


def test_plain_buffer_on_tensors_and_list_storage():
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(torch.arange(6) * 10)
    assert rb[1:3].tolist() == [10, 20] and rb[5].item() == 50
    lb = ReplayBuffer(storage=ListStorage(10))
    lb.extend(["a", "b", "c"])
    assert lb[1] == "b" and lb[:2] == ["a", "b"]


def test_transform_applies_as_for_sample():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=lambda x: x * 2)
    rb.extend(torch.arange(4))
    assert rb[:].tolist() == [0, 2, 4, 6]


def test_ndim2_storage_positions_cover_every_stored_row():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8, ndim=2))
    data = TensorDict({"r": torch.arange(6).reshape(2, 3)}, [2, 3])
    rb.extend(data)
    assert len(rb) == 6
    assert sorted(rb[:]["r"].tolist()) == list(range(6))


def test_compressed_storage_reads_one_row_of_mixed_dtypes():
    # one row's byte slice is contiguous at an odd offset: it must still view as int64
    rb = TensorDictReplayBuffer(storage=CompressedStorage(5), batch_size=1)
    rb.extend(_rows(3))
    assert rb.sample()["r"].shape == (1,)
    assert rb[2]["r"].item() == 2
