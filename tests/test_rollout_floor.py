"""``benchmarks/rollout_floor.py``: the plain loop that floors the collector (issue 42) does
the same work as the collector and GAE, so its time is a floor of theirs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from rl_objectives import GAE
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]


def _floor():
    spec = importlib.util.spec_from_file_location(
        "_rollout_floor", ROOT / "benchmarks" / "rollout_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plain_floor_computes_what_the_collector_and_gae_do() -> None:
    floor = _floor()
    _, cfg, env, actor, critic = floor._setup(ROOT)
    env.close()
    loop = floor.PlainRollout(cfg, *floor._plain_nets(actor, critic))
    try:
        for _ in range(3):  # CartPole under a near-uniform policy ends episodes inside these
            loop.collect()
    finally:
        loop.venv.close()
    assert loop.is_init.any() and (loop.terminated | loop.truncated).any()
    # a finished sub-env starts again from a fresh observation, not the final one
    done = loop.terminated[:-1] | loop.truncated[:-1]
    assert torch.equal(loop.obs[1:][~done], loop.next_obs[:-1][~done])
    assert not torch.equal(loop.obs[1:][done], loop.next_obs[:-1][done])
    assert torch.equal(loop.is_init[1:], done)
    adv, returns = loop.advantage()
    # the library's GAE on the same transitions ([N, T], time last) gives the same numbers
    flags = {"terminated": loop.terminated, "truncated": loop.truncated,
             "done": loop.terminated | loop.truncated}
    td = TensorDict({"observation": loop.obs, "next": TensorDict({
        "observation": loop.next_obs, "reward": loop.reward[..., None],
        **{k: v[..., None] for k, v in flags.items()}})}, [cfg.steps_per_env, cfg.num_envs])
    td = td.transpose(0, 1).contiguous()
    with torch.no_grad():
        GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=True)(td)
    torch.testing.assert_close(td["advantage"].squeeze(-1), adv.t())
    torch.testing.assert_close(td["value_target"].squeeze(-1), returns.t())
