"""The CUDA-only code paths, checked against their CPU or torch references (``-m cuda``).

Each test carries the ``cuda`` marker and skips on a machine without CUDA, with the
reason; ``tools/gpu/run_check.py`` runs them on a lent GPU machine, where gymnasium is not
installed, so the env here is a small torch one. Covered: the Triton priority tree, the
recurrent ``"triton"`` backend end to end (forward and backward, against float64), the collector's
CUDA-graphed policy, NVTX ranges and ``Timing``'s CUDA synchronisation (the update
step's CUDA graph is in rl-objectives' ``test_objectives_update_step.py``).
"""

from __future__ import annotations

import pytest
import torch
from rl_envs import Categorical, Composite, EnvBase, Unbounded
from tensordict import TensorDict

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class _WalkEnv(EnvBase):
    """``n`` random walks on the GPU: the observation moves by the action minus 0.5."""

    def __init__(self, n: int = 4, device: str = "cuda"):
        super().__init__(batch_size=(n,), device=device)
        self.observation_spec = Composite(observation=Unbounded((n, 3)), shape=(n,))
        self.action_spec = Categorical(2, (n,))
        self.reward_spec = Unbounded((n, 1))
        self.pos = torch.zeros(n, 3, device=device)

    def _reset(self, td):
        self.pos = torch.zeros_like(self.pos)
        return TensorDict(observation=self.pos.clone(), batch_size=self.batch_size,
                          device=self.device)

    def _step(self, td):
        self.pos = self.pos + td["action"].unsqueeze(-1).float() - 0.5
        out = TensorDict(observation=self.pos.clone(), reward=self.pos[:, :1].clone(),
                         batch_size=self.batch_size, device=self.device)
        out["terminated"] = self.pos[:, :1].abs() > 3
        return out

    def _set_seed(self, seed):
        torch.manual_seed(seed)


def test_triton_priority_tree_samples_as_the_torch_tree():
    from rl_replay import PriorityTree, TritonPriorityTree

    capacity, n = 100_000, 8192
    prio = torch.rand(capacity, dtype=torch.float64, device="cuda") + 1e-3
    trees = [PriorityTree(capacity, device="cuda"), TritonPriorityTree(capacity, device="cuda")]
    index = torch.arange(capacity, device="cuda")
    for tree in trees:
        tree.update(index, prio)
    u = torch.rand(n, dtype=torch.float64, device="cuda")
    ref, got = (tree.sample(u) for tree in trees)
    assert trees[1].total() == pytest.approx(trees[0].total(), rel=1e-12)
    assert (ref == got).float().mean() > 0.999  # float64 sums in another order at the edges
    again = torch.randint(0, capacity, (n,), device="cuda")
    for tree in trees:
        tree.update(again, torch.full((n,), 5.0, dtype=torch.float64, device="cuda"))
    assert trees[1].total() == pytest.approx(trees[0].total(), rel=1e-12)


def test_recurrent_triton_backend_matches_a_float64_reference_forward_and_backward():
    """The Triton kernels (fp32, ``"ieee"`` matmuls) against the ``"pad"`` backend run in
    float64 on the CPU: cuDNN's own LSTM on the GPU uses TF32 by default
    (``torch.backends.cudnn.allow_tf32``), off from float32 by ~1e-4, too far to be the
    reference of an fp32 kernel."""
    import copy

    from rl_recurrent import LSTMModule, set_recurrent_mode

    torch.manual_seed(0)
    b, t = 8, 32
    is_init = torch.rand(b, t, 1, device="cuda") < 0.1
    is_init[:, 0] = True
    td = TensorDict({"obs": torch.randn(b, t, 16, device="cuda"), "is_init": is_init}, [b, t])
    module = LSTMModule(16, 32, in_key="obs", out_key="feat", device="cuda",
                        recurrent_matmul_precision="ieee", recurrent_backend="triton")
    reference = copy.deepcopy(module).to("cpu", torch.float64)
    reference.recurrent_backend = "pad"
    grads = {}
    for name, m, batch in (("triton", module, td.clone()),
                           ("ref", reference, td.to("cpu").apply(_as_float64))):
        with set_recurrent_mode(True):
            out = m(batch)["feat"]
        out.square().sum().backward()
        grads[name] = (out.detach().cpu().float(),
                       [p.grad.detach().cpu().float() for p in m.parameters()])
    torch.testing.assert_close(grads["triton"][0], grads["ref"][0], rtol=1e-4, atol=1e-5)
    for g, r in zip(grads["triton"][1], grads["ref"][1], strict=True):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-4)


def _as_float64(x: torch.Tensor) -> torch.Tensor:
    return x.double() if x.is_floating_point() else x


def test_collector_cudagraph_policy_matches_eager_policy():
    from rl_collectors import Collector
    from rl_modules import MLP, ProbabilisticActor
    from tensordict.nn import TensorDictModule

    def run(cudagraph: bool):
        torch.manual_seed(0)
        env = _WalkEnv()
        env.set_seed(0)
        actor = ProbabilisticActor(
            TensorDictModule(MLP(3, 2, num_cells=16, depth=1), ["observation"], ["logits"]),
            ["logits"], distribution_class=torch.distributions.Categorical,
            return_log_prob=True).cuda()
        # deterministic actions (the mode): a graph's replays draw from other Philox
        # offsets than eager sampling does, so sampled walks would part at the first step
        collector = Collector(env, actor, frames_per_batch=64, total_frames=192,
                              cudagraph_policy=cudagraph, exploration_type="deterministic")
        try:
            return [(b["logits"].clone(), b["action"].clone()) for b in collector]
        finally:
            collector.shutdown()

    eager, graphed = run(False), run(True)
    for (e, e_action), (g, g_action) in zip(eager, graphed, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
        assert torch.equal(g_action, e_action)


NVTX_CHILD = """
import torch
pushed, popped = [], []
push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
torch.cuda.nvtx.range_push = lambda name: (pushed.append(name), push(name))[1]
torch.cuda.nvtx.range_pop = lambda: (popped.append(1), pop())[1]
import rl_profiling
assert rl_profiling.set_nvtx_enabled(True) is True
rl_profiling.set_profiling_enabled(True)
with rl_profiling.record("cuda_paths.nvtx"):
    torch.ones(4, device="cuda").sum()
torch.cuda.synchronize()
rl_profiling.set_nvtx_enabled(False)
with rl_profiling.record("cuda_paths.after"):
    pass
print(pushed, len(popped))
"""


def test_nvtx_ranges_open_and_close_on_cuda():
    """In an armed process (``RL_PROFILING=1`` is read at import, so a child), an enabled
    range pushes one NVTX range and pops it; after ``set_nvtx_enabled(False)`` none."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, RL_PROFILING="1")
    out = subprocess.run([sys.executable, "-c", NVTX_CHILD], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "['cuda_paths.nvtx'] 1", out.stdout


def test_timing_cuda_sync_waits_for_the_gpu():
    from rl_profiling import Timing

    def busy():  # about 50 ms of GPU work, queued asynchronously
        torch.cuda._sleep(50_000_000)

    busy()
    torch.cuda.synchronize()
    timings = {}
    for sync in (False, True):
        timing = Timing(cuda_sync=sync)
        with timing.add_time("gpu"):
            busy()
        torch.cuda.synchronize()
        timings[sync] = timing.to_dict()["gpu"]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    busy()
    end.record()
    torch.cuda.synchronize()
    gpu_s = start.elapsed_time(end) / 1e3
    assert timings[True] >= 0.8 * gpu_s
    assert timings[False] < 0.5 * timings[True]  # the launch alone returns at once
