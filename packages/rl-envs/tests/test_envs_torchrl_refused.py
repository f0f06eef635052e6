"""TorchRL's batched-env arguments that have no counterpart here are refused with an error
that names what to use instead (not Python's bare "unexpected keyword argument")."""

from __future__ import annotations

import functools

import psutil
import pytest
from rl_envs import GymEnv, ParallelEnv, SerialEnv
from rl_envs._batched_args import TORCHRL_ONLY

MAKE = functools.partial(GymEnv, "CartPole-v1", categorical_action_encoding=True)


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
@pytest.mark.parametrize("name", sorted(TORCHRL_ONLY))
def test_torchrl_arguments_are_refused_with_the_replacement(cls, name):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(TypeError) as info:
        cls(2, MAKE, **{name: True})
    assert (
        str(info.value) == f"{name}: TorchRL's argument is not supported here; {TORCHRL_ONLY[name]}"
    )
    assert {
        p.pid for p in psutil.Process().children(recursive=True)
    } - before == set()  # nothing started


def test_a_misspelt_argument_is_still_a_plain_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_worker'"):
        SerialEnv(2, MAKE, num_worker=2)


def test_serial_for_single_gives_a_serial_env_for_one_worker_and_device_cpu_is_accepted():
    # TorchRL's rule: ParallelEnv(1, ..., serial_for_single=True) is a SerialEnv (no process)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    env = ParallelEnv(1, MAKE, serial_for_single=True, device="cpu", timeout=30.0)
    try:
        assert type(env) is SerialEnv and env.batch_size == (1,)
        assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
        assert env.rollout(3).batch_size == (1, 3)
    finally:
        env.close()
    with SerialEnv(2, MAKE, serial_for_single=True, device=None) as env:
        assert env.batch_size == (2,)


def test_a_device_other_than_the_cpu_is_refused_before_any_process():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match=r"device: the sub-envs run on the CPU here; .*'cuda'"):
        ParallelEnv(2, MAKE, device="cuda")
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
