"""TD3 on a MuJoCo robot (HalfCheetah-v5 by default): ``sac_pendulum.py``'s loop with
RL-Zoo's MuJoCo ``TD3`` settings (``hyperparams/td3.yml``).

    uv run examples/td3_mujoco.py                        # HalfCheetah-v5, 100k frames
    uv run examples/td3_mujoco.py --env-id Hopper-v5     # any Box-action env
    uv run examples/td3_mujoco.py --checkpoint-dir runs/td3 --checkpoint-every 20000 --resume

Everything but the defaults and ``PARTS`` is ``sac_pendulum.py`` (read it top to bottom
there) with ``--algo td3``: a deterministic actor squashed into the action bounds
(``TanhModule``) plus Gaussian exploration noise of std 0.1 times the bound
(``AdditiveGaussianModule``), ``TD3Loss`` with two critics, their targets and target
policy smoothing (noise 0.2 clipped to 0.5, times the bound), the actor and the targets
updated every second gradient step. Uniform random actions for the first 10,000 frames,
then one gradient step per frame on 256 transitions, Adam at 1e-3.

``PARTS`` makes the gradient step cheaper on the CPU without changing what it computes:
the networks' linear layers are ``OneDNNLinear`` (a training batch's products go to
oneDNN, which uses AVX-512 where MKL, on AMD CPUs, does not: about half the time of a
256x256 layer here) and the Adam is fused (one kernel over every parameter: about 0.6 of
the per-tensor loop's time, SB3's default, at these widths). Differences from RL-Zoo:
256x256 ReLU networks (RL-Zoo: 400x300; our example has one width for both layers), and
these two kernels (the same update, computed by other code).
"""

from __future__ import annotations

import dataclasses
import json

import torch
from rl_modules import onednn_linears
from sac_pendulum import Config as PendulumConfig
from sac_pendulum import Parts, main, make_agent, parse_args


@dataclasses.dataclass
class Config(PendulumConfig):
    """TD3 hyper-parameters for MuJoCo (the fields are ``sac_pendulum.Config``'s)."""

    env_id: str = "HalfCheetah-v5"
    num_envs: int = 1
    steps_per_env: int = 1
    total_frames: int = 100_000
    learning_starts: int = 10_000
    buffer_size: int = 1_000_000
    batch_size: int = 256
    updates_per_frame: float = 1.0
    lr: float = 1e-3
    hidden: int = 256
    algo: str = "td3"
    policy_delay: int = 2
    exploration_noise: float = 0.1


def make_onednn_agent(env, cfg: Config):
    """``sac_pendulum``'s actor and critic with their linear layers on oneDNN (``PARTS``)."""
    actor, qvalue = make_agent(env, cfg)
    return onednn_linears(actor), onednn_linears(qvalue)


def make_fused_optimizer(loss_fn, cfg: Config) -> torch.optim.Optimizer:
    """``sac_pendulum``'s Adam (every trained parameter, ``--lr``), fused."""
    params = [p for p in loss_fn.parameters() if p.requires_grad]
    return torch.optim.Adam(params, lr=cfg.lr, fused=True)


# what this example hands sac_pendulum's loop (benchmarks/peers_sac_step.py times it too)
PARTS = Parts(agent=make_onednn_agent, optimizer=make_fused_optimizer)

if __name__ == "__main__":
    print(json.dumps(main(parse_args(Config, __doc__), PARTS)))
