"""The collector knobs: compile_policy, cudagraph_policy, trust_policy, no_cuda_sync,
filter_warnings_subprocess (real envs, real compilation, real worker processes)."""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from rl_collectors import (
    Collector,
    CollectorError,
    CollectorOptions,
    MultiSyncCollector,
)
from rl_collectors._strategies import PolicyActor
from rl_envs import GymEnv
from tensordict.nn import TensorDictModule

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
import async_batched_helpers as helpers  # noqa: E402

sys.path.remove(HERE)


def mlp_policy() -> TensorDictModule:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    return TensorDictModule(net, in_keys=["observation"], out_keys=["logits"])


class ArgmaxAction(torch.nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)


def greedy(compiled_from: TensorDictModule) -> torch.nn.Module:
    from tensordict.nn import TensorDictSequential

    return TensorDictSequential(
        compiled_from, TensorDictModule(ArgmaxAction(), in_keys=["logits"], out_keys=["action"])
    )


def collect(policy, **knobs) -> torch.Tensor:
    collector = Collector(
        GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True), policy,
        frames_per_batch=20, total_frames=40, **knobs
    )
    collector.set_seed(3)
    batches = list(collector)
    collector.shutdown()
    return torch.cat([b["logits"] for b in batches], -2), torch.cat(
        [b["action"] for b in batches], -1
    )


@pytest.mark.timeout(300)
def test_compile_policy_output_equals_eager() -> None:
    policy = greedy(mlp_policy())
    eager_logits, eager_actions = collect(policy)
    logits, actions = collect(policy, compile_policy={"backend": "aot_eager"})
    torch.testing.assert_close(logits, eager_logits)
    assert torch.equal(actions, eager_actions)
    collector = Collector(
        GymEnv("CartPole-v1", num_envs=2,
               categorical_action_encoding=True), policy, frames_per_batch=4, compile_policy=True
    )
    assert isinstance(collector._policy_actor.policy, torch._dynamo.eval_frame.OptimizedModule)
    assert collector.policy is policy  # weights and state_dict stay on the eager module
    collector.shutdown()
    with helpers.sleepy_collector(
        0.0, 5, 2, frames_per_batch=10, total_frames=20, compile_policy={"backend": "aot_eager"}
    ) as collector:
        for batch in collector:
            assert torch.equal(batch["action"], batch["observation"][:, 0].long() % 2)


def test_cuda_knobs_are_inert_without_cuda() -> None:
    policy = greedy(mlp_policy())
    plain = collect(policy)
    knobbed = collect(policy, cudagraph_policy=True, no_cuda_sync=True)
    torch.testing.assert_close(knobbed[0], plain[0])
    collector = Collector(
        GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
        policy,
        frames_per_batch=4,
        cudagraph_policy={"warmup": 2},
    )
    assert (
        type(collector._policy_actor) is PolicyActor
        and collector._policy_actor.policy is collector.policy
    )
    collector.shutdown()


def test_a_graphed_policy_keeps_the_rollout_input_bound() -> None:
    """``CudaGraphModule`` rebinds the leaves of the TensorDict it is called on (on a CPU it
    runs its warm-up path every call, which does that too): called bare on the rollout's
    policy input, the policy would read the first observation forever. Through
    ``graphed_in_place`` (what ``cudagraph_policy=True`` installs on CUDA) the batch is
    the eager one."""
    from rl_collectors._policy import graphed_in_place
    from tensordict.nn import CudaGraphModule

    def run(wrap) -> tuple[torch.Tensor, torch.Tensor]:
        collector = Collector(
            GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
            greedy(mlp_policy()), frames_per_batch=20, total_frames=40,
        )
        if wrap is not None:
            actor = collector._policy_actor
            with pytest.warns(UserWarning, match="without CUDA"):
                graphed = CudaGraphModule(actor.policy)
            actor.policy = wrap(graphed, collector.out_keys)
        collector.set_seed(3)
        batches = list(collector)
        collector.shutdown()
        return (torch.cat([b["observation"] for b in batches], -2),
                torch.cat([b["logits"] for b in batches], -2))

    eager = run(None)
    graphed = run(graphed_in_place)
    bare = run(lambda module, keys: module)
    for got, want in zip(graphed, eager, strict=True):
        torch.testing.assert_close(got, want)
    assert not torch.equal(bare[1], eager[1])  # the hazard the wrapper removes


class Normalise(torch.nn.Module):
    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return obs / 10.0, (obs[..., 0] > 0).long()


def test_trust_policy_skips_the_output_checks() -> None:
    policy = TensorDictModule(
        Normalise(), in_keys=["observation"], out_keys=["observation", "action"]
    )
    make = partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)
    with pytest.raises(CollectorError, match="overwrites the env entries"):
        Collector(make, policy, frames_per_batch=4)
    collector = Collector(make, policy, frames_per_batch=4, total_frames=8, trust_policy=True)
    assert collector.env.action_checks_left == 0
    assert sum(b.numel() for b in collector) == 8
    collector.shutdown()


def test_knob_types_are_checked() -> None:
    with pytest.raises(TypeError, match="compile_policy"):
        CollectorOptions(compile_policy="yes")
    with pytest.raises(TypeError, match="trust_policy"):
        CollectorOptions(trust_policy=1)
    with pytest.raises(TypeError, match="no_cuda_sync"):
        CollectorOptions(no_cuda_sync=None)


@pytest.mark.timeout(600)
def test_filter_warnings_subprocess_switch(monkeypatch) -> None:
    monkeypatch.syspath_prepend(HERE)  # workers import async_batched_helpers by name
    make = partial(helpers.make_sleepy, 0.0, 5)
    quiet = MultiSyncCollector([make], None, frames_per_batch=2, start_timeout=500.0)
    loud = MultiSyncCollector(
        [make], None, frames_per_batch=2, start_timeout=500.0, filter_warnings_subprocess=False
    )
    try:
        assert quiet.map_fn("async_batched_helpers.warning_shown", [()]) == [False]
        assert loud.map_fn("async_batched_helpers.warning_shown", [()]) == [True]
    finally:
        quiet.shutdown()
        loud.shutdown()
