"""TorchRL's recurrent-module arguments with no counterpart here name what to use instead."""

from __future__ import annotations

import pytest
from rl_recurrent import GRUModule, LSTMModule
from rl_recurrent._modules import TORCHRL_ONLY


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
@pytest.mark.parametrize("name", sorted(TORCHRL_ONLY))
def test_torchrl_arguments_are_refused_with_the_replacement(cls, name):
    with pytest.raises(TypeError) as info:
        cls(input_size=3, hidden_size=4, in_key="x", out_key="y", **{name: True})
    assert (
        str(info.value) == f"{name}: TorchRL's argument is not supported here; {TORCHRL_ONLY[name]}"
    )
    with pytest.raises(
        TypeError, match=f"{cls.__name__}: got an unexpected keyword argument 'hidden'"
    ):
        cls(input_size=3, hidden_size=4, in_key="x", out_key="y", hidden=4)


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_python_based_is_the_scan_backend(cls):
    """TorchRL's python_based=True (its cell stepped in Python, no cuDNN) is 'scan' here."""
    kw = {"input_size": 3, "hidden_size": 4, "in_key": "x", "out_key": "y"}
    assert cls(**kw, python_based=True).recurrent_backend == "scan"
    assert cls(**kw, python_based=True, recurrent_backend="scan").recurrent_backend == "scan"
    assert cls(**kw, python_based=False).recurrent_backend == "auto"
    assert cls(**kw, python_based=False, recurrent_backend="pad").recurrent_backend == "pad"
    with pytest.raises(ValueError, match=r"python_based=True is recurrent_backend='scan'.*'pad'"):
        cls(**kw, python_based=True, recurrent_backend="pad")
    with pytest.raises(TypeError, match=r"python_based: expected a bool, received 'yes'"):
        cls(**kw, python_based="yes")
