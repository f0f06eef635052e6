"""``split_trajectories(..., as_nested=True)``, TorchRL's unpadded form (issue 38): each
leaf a nested tensor of the trajectories; the same steps as
the padded form's masked rows, trajectory by trajectory; batch size ``[num_trajs]`` (TorchRL's
``[num_trajs, -1]`` needs a private tensordict call)."""

from __future__ import annotations

import pytest
import torch
from rl_collectors import split_trajectories
from tensordict import TensorDict


def _batch(done: list[list[bool]]) -> TensorDict:
    d = torch.tensor(done)
    rows, steps = d.shape
    return TensorDict({
        "observation": torch.arange(rows * steps * 3.0).reshape(rows, steps, 3),
        "action": torch.arange(rows * steps).reshape(rows, steps),
        "next": {"done": d.unsqueeze(-1), "reward": torch.randn(rows, steps, 1)},
    }, [rows, steps])


def _check_same_steps(nested: TensorDict, padded: TensorDict) -> None:
    mask = padded["collector", "mask"]
    assert nested.batch_size == padded.batch_size[:1] and ("collector", "mask") not in (
        nested.keys(True, True))
    for i in range(padded.batch_size[0]):
        n = int(mask[i].sum())
        for key in ("observation", "action", ("next", "done"), ("next", "reward")):
            assert nested[key].is_nested
            assert torch.equal(nested[key][i], padded[key][i, :n]), (key, i)


@pytest.mark.parametrize("layout", [True, torch.jagged])
def test_nested_holds_the_padded_forms_steps(layout):
    td = _batch([[False, True, False, False, False], [True, False, False, True, False]])
    padded, nested = split_trajectories(td), split_trajectories(td, as_nested=layout)
    assert padded.batch_size == (5, 3)  # 2, 3 | 1, 3, 1
    _check_same_steps(nested, padded)
    one_row = _batch([[False, False, True, False]])[0]  # a [T] batch
    _check_same_steps(split_trajectories(one_row, as_nested=True), split_trajectories(one_row))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")
def test_strided_layout_on_request():
    td = _batch([[False, True, False, False]])
    nested = split_trajectories(td, as_nested=torch.strided)
    assert nested["observation"].layout == torch.strided
    _check_same_steps(nested, split_trajectories(td))


def test_whole_rows_stay_padded_as_in_torchrl_and_bad_values_are_named():
    td = _batch([[False, False, False], [False, False, False]])
    out = split_trajectories(td, as_nested=True)
    assert out.batch_size == (2, 3) and bool(out["collector", "mask"].all())
    with pytest.raises(ValueError, match=r"as_nested: expected a bool or a torch.layout"):
        split_trajectories(td, as_nested="yes")
