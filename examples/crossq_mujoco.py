"""CrossQ on a MuJoCo robot (HalfCheetah-v5 by default): ``sac_pendulum.py``'s loop with
sb3-contrib's ``CrossQ`` defaults.

    uv run examples/crossq_mujoco.py                     # HalfCheetah-v5, 30k frames
    uv run examples/crossq_mujoco.py --env-id Hopper-v5  # any Box-action env
    uv run examples/crossq_mujoco.py --checkpoint-dir runs/crossq --checkpoint-every 20000

The loop, the env, the actor and the logging are ``sac_pendulum.py``'s with ``--algo
crossq`` (read it top to bottom there): ``CrossQLoss`` is SAC without target critics, the
stored ``(s, a)`` and the next ``(s', a')`` going through each critic as one batch so its
batch renormalisation sees both. What this file sets is sb3-contrib's critic and optimiser:
each critic is ``BatchRenorm1d -> Linear -> ReLU`` twice, then ``BatchRenorm1d ->
Linear`` (a renorm layer on the input too; momentum 0.01, eps 1e-3, 100k warm-up steps),
``--critic-hidden`` wide; Adam with beta1 0.5 at 1e-3; the actor and the temperature
updated every third gradient step; 100 random frames first. Differences from
sb3-contrib: the actor has no batch renormalisation (sb3-contrib's has); the Adam is fused.

The budget, 30,000 frames, is what fits about an hour here: the critics are wide, and one
gradient step costs far more than SAC's (``benchmarks/bench_crossq.py``; the results page
says the figures). With 100k warm-up steps the critics' renorm layers stay plain batch
norm over the whole run, as sb3-contrib's do over its first 100k steps.
"""

from __future__ import annotations

import dataclasses
import json

import torch
from rl_modules import BatchRenorm1d, ValueOperator
from sac_pendulum import Config as PendulumConfig
from sac_pendulum import Parts, main, make_agent, parse_args
from torch import nn


@dataclasses.dataclass
class Config(PendulumConfig):
    """CrossQ hyper-parameters for MuJoCo (the fields are ``sac_pendulum.Config``'s).

    Attributes:
        adam_beta1: Adam's first-moment decay (sb3-contrib's CrossQ: 0.5).
        renorm_warmup: gradient steps the critics' ``BatchRenorm1d`` behave as batch norm.
    """

    env_id: str = "HalfCheetah-v5"
    num_envs: int = 1
    steps_per_env: int = 1
    total_frames: int = 30_000
    learning_starts: int = 100
    buffer_size: int = 1_000_000
    batch_size: int = 256
    updates_per_frame: float = 1.0
    lr: float = 1e-3
    hidden: int = 256
    algo: str = "crossq"
    policy_delay: int = 3
    critic_hidden: int = 1024
    adam_beta1: float = 0.5
    renorm_warmup: int = 100_000


class RenormQNet(nn.Module):
    """``Q(s, a)``: ``[BatchRenorm1d -> Linear -> ReLU] x 2 -> BatchRenorm1d -> Linear``.

    Examples:
        >>> q = RenormQNet(3, 2, 8, warmup_steps=10)
        >>> q(torch.randn(4, 3), torch.randn(4, 2)).shape
        torch.Size([4, 1])
    """

    def __init__(self, n_obs: int, n_act: int, width: int, **renorm) -> None:
        super().__init__()
        renorm = {"momentum": 0.01, "eps": 1e-3, **renorm}
        self.net = nn.Sequential(
            BatchRenorm1d(n_obs + n_act, **renorm), nn.Linear(n_obs + n_act, width), nn.ReLU(),
            BatchRenorm1d(width, **renorm), nn.Linear(width, width), nn.ReLU(),
            BatchRenorm1d(width, **renorm), nn.Linear(width, 1),
        )

    def forward(self, observation: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observation, action], -1))


def make_crossq_agent(env, cfg: Config):
    """``sac_pendulum``'s SAC actor and sb3-contrib's batch-renormalised critic."""
    actor, _ = make_agent(env, dataclasses.replace(cfg, algo="sac"))
    n_obs = env.observation_spec["observation"].shape[-1]
    qnet = RenormQNet(n_obs, env.action_spec.shape[-1], cfg.critic_hidden or cfg.hidden,
                      warmup_steps=cfg.renorm_warmup)
    qvalue = ValueOperator(qnet, in_keys=["observation", "action"])
    return actor, qvalue.to(cfg.device)


def make_crossq_optimizer(loss_fn, cfg: Config) -> torch.optim.Optimizer:
    """Adam with sb3-contrib's CrossQ betas ``(adam_beta1, 0.999)``, fused (one kernel
    over all the parameters: on the CPU about 4x faster than the per-tensor loop at these
    widths, ``benchmarks/bench_crossq.py``)."""
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    return torch.optim.Adam(params, lr=cfg.lr, betas=(cfg.adam_beta1, 0.999), fused=True)


if __name__ == "__main__":
    parts = Parts(agent=make_crossq_agent, optimizer=make_crossq_optimizer)
    print(json.dumps(main(parse_args(Config, __doc__), parts)))
