"""Recurrent path: an LSTM policy collected step by step, replayed in recurrent mode.

An ``LSTMModule`` policy runs in sequential mode inside a ``Collector`` over CartPole with
``InitTracker`` and the module's primer. The batches (several trajectories per row, with
dones in the middle) go into a replay buffer, come back as slices from a
``SliceSampler`` keyed on ``("collector", "traj_ids")``, and the same weights run in
recurrent mode over them, once per backend: the outputs must equal what the policy wrote
during collection, and a PPO loss on them must see a ratio of exactly one.
"""

from __future__ import annotations

import pytest
import torch
from rl_collectors import Collector
from rl_envs import GymEnv, InitTracker, StepCounter, TransformedEnv
from rl_objectives import ClipPPOLoss
from rl_recurrent import LSTMModule, set_recurrent_mode
from rl_replay import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

NUM_ENVS, STEPS, HIDDEN, SLICE_LEN = 3, 60, 16, 8
TRAJ_IDS = ("collector", "traj_ids")
POLICY_OUTPUTS = ("embed", "logits", "sample_log_prob")
BACKENDS = [
    "pad",
    "scan",
    pytest.param(
        "triton",
        marks=pytest.mark.skipif(
            not torch.cuda.is_available(), reason="the triton backend needs CUDA"
        ),
    ),
]


def make_policy(backend: str = "auto", device: str = "cpu") -> ProbabilisticTensorDictSequential:
    lstm = LSTMModule(
        4, HIDDEN, in_key="observation", out_key="embed", recurrent_backend=backend, device=device
    )
    return ProbabilisticTensorDictSequential(
        lstm,
        TensorDictModule(torch.nn.Linear(HIDDEN, 2, device=device), ["embed"], ["logits"]),
        ProbabilisticTensorDictModule(
            ["logits"],
            ["action"],
            distribution_class=torch.distributions.Categorical,
            return_log_prob=True,
            log_prob_key="sample_log_prob",
        ),
    )


@pytest.fixture(scope="module")
def collected() -> tuple[ProbabilisticTensorDictSequential, list]:
    """Two [NUM_ENVS, STEPS] batches collected with an untrained LSTM policy (short episodes)."""
    torch.manual_seed(0)
    policy = make_policy()
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=NUM_ENVS,
                                categorical_action_encoding=True), InitTracker())
    env.append_transform(policy[0].make_tensordict_primer())
    env.append_transform(StepCounter())
    env.set_seed(0)
    collector = Collector(
        env, policy, frames_per_batch=NUM_ENVS * STEPS, total_frames=2 * NUM_ENVS * STEPS
    )
    try:
        batches = list(collector)
    finally:
        collector.shutdown()
    return policy, batches


def replay_policy(
    policy: ProbabilisticTensorDictSequential, backend: str
) -> ProbabilisticTensorDictSequential:
    """A fresh policy with the collection weights and the given recurrent backend."""
    device = "cuda" if backend == "triton" else "cpu"
    replay = make_policy(backend, device)
    replay.load_state_dict(policy.state_dict())
    return replay


def run_recurrent(policy: ProbabilisticTensorDictSequential, data):
    """The policy's deterministic part (LSTM + head) in recurrent mode over ``[B, T]`` data."""
    device = next(policy.parameters()).device
    td = data.exclude(
        *POLICY_OUTPUTS, ("next", "recurrent_state_h"), ("next", "recurrent_state_c")
    ).to(device)
    with set_recurrent_mode(True), torch.no_grad():
        policy[0](td)
        policy[1](td)
    return td.cpu()


def test_collected_layout_has_mid_batch_dones_and_carried_states(collected) -> None:
    _, batches = collected
    for i, batch in enumerate(batches):
        assert batch.batch_size == (NUM_ENVS, STEPS)
        is_init = batch["is_init"].squeeze(-1)
        done = batch["next", "done"].squeeze(-1)
        assert done[:, :-1].any(dim=1).all(), "every row should hold a mid-batch done"
        assert torch.equal(is_init[:, 1:], done[:, :-1])
        assert bool(is_init[:, 0].all()) == (i == 0)
        for key in ("recurrent_state_h", "recurrent_state_c"):
            h, next_h = batch[key], batch["next", key]
            assert h.shape == (NUM_ENVS, STEPS, 1, HIDDEN)
            # zero where a trajectory starts and carried from ("next", key) otherwise: the
            # stored next state is the one the next step starts from (a value bootstrapped
            # from it sees the state the policy saw), on steps with and without a done
            assert (h[is_init] == 0).all()
            assert torch.equal(h[:, 1:][~is_init[:, 1:]], next_h[:, :-1][~is_init[:, 1:]]), key
            assert (h[~is_init].abs().sum((-1, -2)) > 0).all()
    assert (~done).all(dim=0).any(), "some step should have no done in any row"
    # the second batch continues the first batch's trajectories (and hidden states)
    first, second = batches
    for key in ("recurrent_state_h", "recurrent_state_c"):
        assert torch.equal(second[key][:, 0], first["next", key][:, -1])
    assert torch.equal(second[TRAJ_IDS][:, 0], first[TRAJ_IDS][:, -1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_recurrent_mode_over_collected_batches_matches_collection(collected, backend: str) -> None:
    policy, batches = collected
    replay = replay_policy(policy, backend)
    for batch in batches:  # the second batch starts mid-trajectory: the stored state is used
        out = run_recurrent(replay, batch)
        torch.testing.assert_close(out["embed"], batch["embed"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out["logits"], batch["logits"], atol=1e-5, rtol=1e-5)


def sample_slices(batches, num_slices: int = 16):
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4 * NUM_ENVS * STEPS),
        sampler=SliceSampler(slice_len=SLICE_LEN, traj_key=TRAJ_IDS),
        batch_size=num_slices * SLICE_LEN,
    )
    stored = torch.cat([b.reshape(-1) for b in batches])
    for batch in batches:
        buffer.extend(batch.reshape(-1))
    torch.manual_seed(1)
    sample = buffer.sample().reshape(num_slices, SLICE_LEN)
    reference = stored[sample["index"]]
    # slices never cross a trajectory boundary and are consecutive steps
    assert (sample[TRAJ_IDS] == sample[TRAJ_IDS][:, :1]).all()
    assert (sample["step_count"][:, 1:] == sample["step_count"][:, :-1] + 1).all()
    return sample, reference


def slice_losses(replay, sample) -> dict:
    critic = TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["state_value"])
    loss_fn = ClipPPOLoss(replay, critic)
    td = sample.exclude(
        "embed", "logits", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")
    )
    td["advantage"] = torch.randn(*td.batch_size, 1)
    td["value_target"] = torch.randn(*td.batch_size, 1)
    with set_recurrent_mode(True):
        return loss_fn(td)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sampled_slices_with_stored_is_init_match_collection(collected, backend: str) -> None:
    """The slices carry the right hidden states: with the episode starts as collected
    (``is_init`` from storage), recurrent mode reproduces the collection outputs and the
    PPO ratio is exactly one."""
    policy, batches = collected
    sample, reference = sample_slices(batches)
    assert not reference["is_init"][:, 0].all(), "the sample should hold mid-trajectory slices"
    sample["is_init"] = reference["is_init"]
    replay = replay_policy(policy, backend)
    out = run_recurrent(replay, sample)
    torch.testing.assert_close(out["embed"], reference["embed"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out["logits"], reference["logits"], atol=1e-5, rtol=1e-5)
    if backend != "triton":
        losses = slice_losses(replay, sample)
        assert float(losses["kl_approx"]) < 1e-6
        assert float(losses["ESS"]) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sampled_slices_match_collection(collected, backend: str) -> None:
    policy, batches = collected
    sample, reference = sample_slices(batches)
    assert not reference["is_init"][:, 0].all(), "the sample should hold mid-trajectory slices"
    out = run_recurrent(replay_policy(policy, backend), sample)
    torch.testing.assert_close(out["embed"], reference["embed"], atol=1e-5, rtol=1e-5)
