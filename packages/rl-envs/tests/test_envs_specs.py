"""Specs: shapes, dtypes, rand/zero/is_in/project/expand/to and readable mismatches."""

from __future__ import annotations

import pytest
import torch
from rl_envs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    OneHot,
    SpecError,
    Unbounded,
)
from tensordict import TensorDict

LEAVES = [
    Unbounded((4, 3)),
    Unbounded((4,), dtype=torch.int64),
    Bounded(-1.0, 2.0, (4, 3)),
    Bounded(torch.tensor([0.0, -1.0]), torch.tensor([1.0, 1.0]), (4, 2)),
    Bounded(0, 5, (4, 1), dtype=torch.int64),
    Categorical(3, (4,)),
    OneHot(3, (4, 3)),
    Binary(5, (4, 5)),
    MultiCategorical([2, 3, 4], (4, 3)),
]


@pytest.mark.parametrize("spec", LEAVES, ids=lambda s: type(s).__name__)
def test_rand_and_zero_are_in_spec(spec):
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        value = spec.rand(generator=gen)
        assert value.shape == spec.shape and value.dtype == spec.dtype
        assert spec.is_in(value), spec.mismatch(value)
    assert spec.zero().shape == spec.shape
    assert spec.rand((2,)).shape == (2, *spec.shape)


@pytest.mark.parametrize("spec", LEAVES, ids=lambda s: type(s).__name__)
def test_expand_to_clone_eq(spec):
    big = spec.expand(2, *spec.shape)
    assert big.shape == (2, *spec.shape)
    assert big.is_in(big.rand())
    assert spec.clone() == spec
    assert spec.to("cpu") == spec
    with pytest.raises(SpecError, match="must end with"):
        spec.expand(7, 7, 7, 7, 7)


def test_bounded_project_and_out_of_bounds_message():
    spec = Bounded(-1.0, 1.0, (2, 2))
    bad = torch.tensor([[0.0, 3.0], [0.0, 0.0]])
    assert not spec.is_in(bad)
    msg = spec.mismatch(bad)
    assert "out of bounds" in msg and "(0, 1)" in msg and "3.0" in msg
    assert spec.is_in(spec.project(bad))
    assert not spec.is_in(torch.full((2, 2), float("nan")))


def test_shape_and_dtype_mismatch_name_key_expected_received():
    spec = Categorical(2, (8,))
    with pytest.raises(SpecError) as err:
        spec.assert_is_in(torch.zeros(8, dtype=torch.float32), key="action")
    text = str(err.value)
    assert "'action'" in text and "torch.int64" in text and "torch.float32" in text
    with pytest.raises(SpecError) as err:
        spec.assert_is_in(torch.zeros(4, dtype=torch.int64), key="action")
    assert "(8,)" in str(err.value) and "(4,)" in str(err.value)


def test_categorical_and_multicategorical_ranges():
    assert not Categorical(2, (3,)).is_in(torch.tensor([0, 1, 2]))
    assert not Categorical(2, (3,)).is_in(torch.tensor([0, -1, 1]))
    mc = MultiCategorical([2, 3], (2,))
    assert mc.is_in(torch.tensor([1, 2]))
    assert not mc.is_in(torch.tensor([2, 0]))
    assert mc.is_in(mc.project(torch.tensor([5, -3])))


def test_onehot_and_binary():
    oh = OneHot(3, (2, 3), dtype=torch.int64)
    assert oh.is_in(torch.tensor([[0, 1, 0], [1, 0, 0]]))
    assert not oh.is_in(torch.tensor([[0, 1, 1], [1, 0, 0]]))
    assert oh.is_in(oh.project(torch.tensor([[0.2, 0.9, 0.1], [3, 1, 0]]).long()))
    with pytest.raises(SpecError):
        OneHot(3, (2, 4))
    b = Binary(3, (3,))
    assert not b.is_in(torch.tensor([0, 2, 1], dtype=torch.int8))


def test_composite_nested_keys_rand_zero_mismatches():
    spec = Composite(
        observation=Unbounded((4, 3)),
        nested={"a": Categorical(2, (4,)), "b": Bounded(0.0, 1.0, (4, 2))},
        shape=(4,),
    )
    assert set(spec.keys(True, True)) == {"observation", ("nested", "a"), ("nested", "b")}
    td = spec.rand()
    assert isinstance(td, TensorDict) and td.batch_size == (4,)
    assert spec.is_in(td)
    assert spec.zero()["nested", "b"].shape == (4, 2)
    td["nested", "a"] = torch.full((4,), 5)
    del td["observation"]
    lines = spec.mismatches(td)
    assert any("'observation'" in line and "missing" in line for line in lines)
    assert any("('nested', 'a')" in line and "out of range" in line for line in lines)
    with pytest.raises(SpecError, match="does not match"):
        spec.assert_is_in(td)


def test_composite_rejects_wrong_batch_and_expands():
    spec = Composite(shape=(4,))
    with pytest.raises(SpecError, match="must start with the batch shape"):
        spec["x"] = Unbounded((3, 2))
    spec["x"] = Unbounded((4, 2))
    big = spec.expand(5, 4)
    assert big.shape == (5, 4) and big["x"].shape == (5, 4, 2)
    assert spec.clone() == spec
    with pytest.raises(KeyError, match="no key"):
        spec["y"]
