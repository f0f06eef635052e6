"""SAC on a MuJoCo robot (HalfCheetah-v5 by default): ``sac_pendulum.py``'s loop with
CleanRL's ``sac_continuous_action.py`` settings.

    uv run examples/sac_mujoco.py                        # HalfCheetah-v5, 100k frames
    uv run examples/sac_mujoco.py --env-id Hopper-v5     # any Box-action env
    uv run examples/sac_mujoco.py --algo td3 --policy-delay 2      # TD3Loss, same loop
    uv run examples/sac_mujoco.py --algo crossq --policy-delay 3 --critic-hidden 2048

Everything but the defaults is ``sac_pendulum.py`` (read it top to bottom there): a
``GymEnv`` with ``DoubleToFloat`` and ``RewardSum``; rl-modules' ``ProbabilisticActor``
with a ``TanhNormal`` scaled to the action spec and a ``ValueOperator`` Q-network of which
``SACLoss`` keeps two critics and their targets; uniform random actions for the first
5,000 frames, then one gradient step per frame on 256 transitions. Differences from
CleanRL: one learning rate (3e-4) for actor, critics and temperature (CleanRL: 1e-3 for
the critics), and the actor is updated every step (CleanRL: every second step, twice).
"""

from __future__ import annotations

import dataclasses
import json

from sac_pendulum import Config as PendulumConfig
from sac_pendulum import main, parse_args


@dataclasses.dataclass
class Config(PendulumConfig):
    """SAC hyper-parameters for MuJoCo (the fields are ``sac_pendulum.Config``'s)."""

    env_id: str = "HalfCheetah-v5"
    num_envs: int = 1
    steps_per_env: int = 1
    total_frames: int = 100_000
    learning_starts: int = 5_000
    buffer_size: int = 1_000_000
    batch_size: int = 256
    updates_per_frame: float = 1.0
    lr: float = 3e-4
    hidden: int = 256


if __name__ == "__main__":
    print(json.dumps(main(parse_args(Config, __doc__))))
