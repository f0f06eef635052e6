"""``RemoteOptions``: the remote collectors' shared options, as a dataclass and as keywords.

Every case here fails before a process, a rank or Ray starts.
"""

from __future__ import annotations

from functools import partial

import pytest
from rl_collectors import DistributedDataCollector, RayCollector, RemoteOptions, RPCDataCollector
from rl_envs import GymEnv

MAKE_ENV = partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)
REMOTE = [DistributedDataCollector, RPCDataCollector, RayCollector]


def test_keywords_replace_the_fields_of_the_options_given() -> None:
    base = RemoteOptions(num_collectors=2, timeout=30.0)
    merged = RemoteOptions.merge("X", base, {"timeout": 7.0, "update_after_each_batch": True})
    assert (merged.num_collectors, merged.timeout, merged.update_after_each_batch) == (2, 7.0, True)
    assert (base.timeout, base.update_after_each_batch) == (30.0, False)  # not modified
    assert RemoteOptions.merge("X", None, {"num_collectors": 3}) == RemoteOptions(num_collectors=3)


@pytest.mark.parametrize("cls", REMOTE)
def test_a_bad_option_is_named_whether_given_as_keyword_or_dataclass(cls: type) -> None:
    with pytest.raises(ValueError, match=r"timeout: expected a number of seconds > 0, got 0"):
        cls(MAKE_ENV, frames_per_batch=8, timeout=0)
    with pytest.raises(ValueError, match=r"num_collectors: expected an int >= 1 or None, got 0"):
        cls(MAKE_ENV, frames_per_batch=8, options=RemoteOptions(num_collectors=2), num_collectors=0)


@pytest.mark.parametrize("cls", REMOTE)
def test_one_env_constructor_per_remote_collector(cls: type) -> None:
    with pytest.raises(ValueError, match=r"list of num_collectors=3 callables .* list of 2"):
        cls([MAKE_ENV, MAKE_ENV], frames_per_batch=8, num_collectors=3)
    with pytest.raises(TypeError, match=r"create_env_fn: expected a callable .* received str"):
        cls("CartPole-v1", frames_per_batch=8)


@pytest.mark.parametrize("cls", REMOTE)
def test_a_keyword_that_is_no_option_is_named(cls: type) -> None:
    with pytest.raises(
        TypeError,
        match=rf"{cls.__name__}: unexpected keyword argument 'num_colectors'; "
        r"expected one of RemoteOptions' fields: .*num_collectors",
    ):
        cls(MAKE_ENV, frames_per_batch=8, num_colectors=2)
    with pytest.raises(TypeError, match=r"'storing_devices'.*pass storing_device="):
        cls(MAKE_ENV, frames_per_batch=8, storing_devices=["cpu"])
    with pytest.raises(TypeError, match=r"options: expected a RemoteOptions, got dict"):
        cls(MAKE_ENV, frames_per_batch=8, options={"num_collectors": 2})


def test_ray_refuses_the_launch_options() -> None:
    with pytest.raises(ValueError, match=r"launcher: RayCollector starts its actors through Ray"):
        RayCollector(MAKE_ENV, frames_per_batch=8, launcher="submitit")
    with pytest.raises(ValueError, match=r"num_threads: RayCollector"):
        RayCollector(MAKE_ENV, frames_per_batch=8, options=RemoteOptions(num_threads=4))
