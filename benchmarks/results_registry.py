"""The examples ``results_examples.py`` runs and records: each one's task, target, budget and
the published figures quoted beside ours (``EXAMPLES``), the long ones (``LONG_EXAMPLES``), and
the health page's deliberately wrong short runs (``HEALTH_VARIANTS``, kept in ``HEALTH_RUNS``).

Data only (the standard library alone), read by the script and by its sibling modules.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
# where the example scripts are read from; --examples-dir points elsewhere, e.g. at
# `git archive HEAD examples | tar -x -C DIR`, to run the committed examples while the
# working tree holds someone's unfinished edit of them (the fingerprint follows the file run)
EXAMPLES_DIR = ROOT / "examples"

# name -> task, target (threshold on the mean return of the last 20 episodes), budget
# (the example's default total frames) and the published figures quoted beside ours.
EXAMPLES: dict[str, dict] = {
    "ppo_cartpole": {
        "task": "CartPole-v1", "threshold": 475.0, "budget": 200_000,
        "published": "CleanRL `ppo.py`: 490.04 ± 6.12 after 500k steps "
                     "([CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/#experiment-results))",
    },
    "ppo_lstm_masked_cartpole": {
        "task": "CartPole-v1, velocities hidden", "threshold": 400.0, "budget": 1_000_000,
        "published": "SB3-Contrib `RecurrentPPO` on CartPoleNoVel-v1 (same POMDP): 500.00 ± 0.00 "
                     "([sb3/ppo_lstm-CartPoleNoVel-v1](https://huggingface.co/sb3/ppo_lstm-CartPoleNoVel-v1))",
    },
    "dqn_prioritized": {
        "task": "CartPole-v1", "threshold": 400.0, "budget": 300_000,
        "published": "CleanRL `dqn.py` (uniform replay): 488.69 ± 16.11 after 500k steps "
                     "([CleanRL DQN docs](https://docs.cleanrl.dev/rl-algorithms/dqn/#experiment-results_1))",
    },
    "sac_pendulum": {
        "task": "Pendulum-v1", "threshold": -250.0, "budget": 20_000,
        "published": "SB3 `SAC` (RL Zoo, 20k steps): -176.33 ± 101.55 "
                     "([sb3/sac-Pendulum-v1](https://huggingface.co/sb3/sac-Pendulum-v1))",
    },
    "ppo_mujoco": {
        "task": "Hopper-v5", "threshold": 1500.0, "budget": 1_000_000,
        "published": "CleanRL `ppo_continuous_action.py` has the same defaults; its Hopper curves: "
                     "[CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/)",
    },
    "sac_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 3000.0, "budget": 100_000,
        "published": "CleanRL `sac_continuous_action.py` has nearly the same defaults; its "
                     "HalfCheetah curves: "
                     "[CleanRL SAC docs](https://docs.cleanrl.dev/rl-algorithms/sac/)",
    },
    "td3_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 3000.0, "budget": 100_000,
        "published": "RL-Zoo's `TD3` (the same settings but 400x300 networks), 1M steps: "
                     "[sb3/td3-HalfCheetah-v3](https://huggingface.co/sb3/td3-HalfCheetah-v3)",
    },
    "crossq_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 100.0, "budget": 30_000,
        # the budget and the target, said on the page (figures from the bench's file)
        "budget_from": "crossq_step.json",
        "budget_why": "about an hour a seed. One gradient step per frame at sb3-contrib's "
                      "sizes (critics {critic_width} wide, batch {batch}) took {ours_ms} ms "
                      "of CPU time here (`benchmarks/bench_crossq.py`, {started}, 1-minute "
                      "load {load_start} to {load_end} on 2 CPUs; the same math in plain torch "
                      "{plain_ms} ms), so 30,000 frames take {hours_budget} hours at that load, "
                      "less on an idle machine; 100,000 (SAC's and TD3's budget) would take "
                      "{hours_100k} hours. The target, 100, marks a policy that runs "
                      "forward (a random one scores below zero here). The issue asks CrossQ to "
                      "beat our SAC at CrossQ's budget; what SAC's recorded runs reached at "
                      "30,000 frames: {rival}; CrossQ's final return against it: {versus}. "
                      "sb3-contrib's "
                      "`CrossQ` with the same settings and budget (its side of the race in "
                      "\"Against Stable-Baselines3\" below): {peer}.",
        "rival": "sac_mujoco",
        # the peer's runs at this budget: its side of the race (compare_peers.py's record)
        "peer_from": "peers.json", "peer_task": "crossq-halfcheetah",
        "published": "sb3-contrib's `CrossQ` on six MuJoCo tasks (its docs' results plot): "
                     "[sb3-contrib CrossQ docs](https://sb3-contrib.readthedocs.io/en/master/"
                     "modules/crossq.html#results)",
    },
    "ppo_atari": {
        "task": "ALE/Breakout-v5", "threshold": 10.0, "budget": 2_000_000,
        "published": "CleanRL `ppo_atari.py` has the same defaults; its Breakout curves (10M "
                     "frames): [CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/)",
    },
}


# the examples that take about an hour or more per seed on the 2-core development machine
# (its MuJoCo seeds took 867-1,825 s for PPO Hopper and 1,595-3,555 s for SAC HalfCheetah,
# one core each; ppo_atari ran at 74 frames/s there, so its 2M frames would take hours):
# they are re-recorded only when that machine has the time, and the page says so when
# they lack a run of the current code
LONG_EXAMPLES = ("ppo_mujoco", "sac_mujoco", "td3_mujoco", "crossq_mujoco", "ppo_atari")


# Short runs with one setting made wrong on purpose, beside a short run of the same example
# with its defaults, for the "Is my run healthy?" page (docs/health.md): name -> (example,
# extra options). One seed each (ppo_cartpole: 51,200 frames, 100 batches; dqn_prioritized:
# 100,000 frames, its schedules compressed to that budget; sac_pendulum: 10,000 frames, its
# SAC diagnostics), recorded in HEALTH_RUNS by
# ``--health``; the page quotes their logged series through ``<!-- example-series: NAME TAG -->``.
HEALTH_RUNS = ROOT / "benchmarks" / "results" / "health_runs.json"
HEALTH_VARIANTS: dict[str, tuple[str, list[str]]] = {
    "ppo_cartpole_short": ("ppo_cartpole", ["--total-frames", "51200"]),
    "ppo_cartpole_lr_high": ("ppo_cartpole", ["--total-frames", "51200", "--lr", "0.03"]),
    "ppo_cartpole_critic_swamp": ("ppo_cartpole",
                                  ["--total-frames", "51200", "--critic-coef", "500"]),
    "ppo_cartpole_lr_extreme": ("ppo_cartpole", ["--total-frames", "51200", "--lr", "0.3"]),
    "dqn_prioritized_short": ("dqn_prioritized", ["--total-frames", "100000"]),
    "dqn_prioritized_alpha_high": ("dqn_prioritized", ["--total-frames", "100000", "--alpha", "3"]),
    "sac_pendulum_short": ("sac_pendulum", ["--total-frames", "10000"]),
}
