"""MultiStep as a Collector postproc on a real gymnasium batch (rl-replay + rl-collectors)."""

from __future__ import annotations

import torch
from rl_collectors import Collector
from rl_envs import GymEnv
from rl_replay import MultiStep


def test_multistep_postproc_on_a_real_collector_batch_matches_a_hand_written_reference() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    env.set_seed(0)
    plain = Collector(env, None, frames_per_batch=120, total_frames=120)
    raw = next(iter(plain)).clone()
    plain.shutdown()
    assert raw["next", "done"].any(), "the batch should cross an episode end"
    out = MultiStep(gamma=0.9, n_steps=3)(raw.clone())
    reward = raw["next", "reward"].reshape(*raw.batch_size)
    done = raw["next", "done"].reshape(*raw.batch_size)
    rows = reward.reshape(-1, reward.shape[-1])
    for i, (r, d) in enumerate(zip(rows, done.reshape(-1, done.shape[-1]), strict=True)):
        expected = []
        for t in range(len(r)):
            total, k = 0.0, 0
            while k < 3 and t + k < len(r):
                total += 0.9**k * float(r[t + k])
                k += 1
                if bool(d[t + k - 1]):
                    break
            expected.append(total)
        got = out["next", "reward"].reshape(-1, r.shape[-1])[i]
        torch.testing.assert_close(got, torch.tensor(expected, dtype=got.dtype))
    # the episode's last step keeps its own next observation; steps cut at the episode end
    ends = done.reshape(-1)
    obs = raw["next", "observation"].reshape(ends.numel(), -1)[ends]
    assert (out["next", "observation"].reshape(ends.numel(), -1)[ends] == obs).all()
    assert (out["steps_to_next_obs"].reshape(-1)[ends] == 1).all()
    # as the collector's postproc: the batch it yields is MultiStep of the batch it collected
    seen = []
    multistep = MultiStep(gamma=0.9, n_steps=3)

    def postproc(batch):
        seen.append(batch.clone())
        return multistep(batch)

    post = Collector(GymEnv("CartPole-v1", num_envs=2,
                            categorical_action_encoding=True), None, frames_per_batch=120,
                     total_frames=120, postproc=postproc)
    via = next(iter(post))
    post.shutdown()
    assert via["steps_to_next_obs"].shape == raw.batch_size
    torch.testing.assert_close(via["next", "original_reward"], seen[0]["next", "reward"])
    again = MultiStep(gamma=0.9, n_steps=3)(seen[0])  # in place, as TorchRL's
    torch.testing.assert_close(via["next", "reward"], again["next", "reward"])
