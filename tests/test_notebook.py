"""A real Jupyter kernel (nbclient + ipykernel) drives every multi-process component with
an env factory and a policy defined in notebook cells, as a Jupyter user writes them.

What a cell defines lives in the kernel's ``__main__``, which a spawned worker cannot
import: it must reach the workers by value (``rl_envs.processes``).
"""

from __future__ import annotations

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
psutil = pytest.importorskip("psutil")

CELLS = [
    """
import torch
from tensordict.nn import TensorDictModule
from rl_envs import GymEnv, ParallelEnv
from rl_collectors import (AsyncBatchedCollector, DistributedDataCollector, MultiAsyncCollector,
                           MultiSyncCollector, WorkerError)

def make_env():
    return GymEnv("CartPole-v1", categorical_action_encoding=True)

class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs):
        return self.linear(obs).argmax(-1)

policy = TensorDictModule(Policy(), in_keys=["observation"], out_keys=["action"])
""",
    """
with ParallelEnv(2, make_env) as env:
    print("ParallelEnv", tuple(env.rollout(3, policy).shape))
""",
    """
for cls in (MultiSyncCollector, MultiAsyncCollector):
    collector = cls([make_env, make_env], policy, frames_per_batch=8, total_frames=16)
    print(cls.__name__, sum(batch.numel() for batch in collector))
    collector.shutdown()
""",
    """
collector = AsyncBatchedCollector(make_env, policy, num_envs=2, frames_per_batch=8, total_frames=16,
                                  backend="multiprocessing")
print("AsyncBatchedCollector", sum(batch.numel() for batch in collector))
collector.shutdown()
""",
    """
collector = DistributedDataCollector(make_env, policy, frames_per_batch=8, total_frames=16,\
 num_collectors=2,
                                     backend="gloo")
print("DistributedDataCollector", sum(batch.numel() for batch in collector))
collector.shutdown()
""",
    """
def broken_env():
    raise ValueError("no env called Nope-v0 here")

try:
    MultiSyncCollector([broken_env, broken_env], policy, frames_per_batch=8, total_frames=16)
except WorkerError as err:
    print("reported:", str(err).splitlines()[0])
""",
]


@pytest.mark.timeout(600)
def test_a_notebook_drives_every_multi_process_component(tmp_path, monkeypatch):
    # The kernel (and the workers it starts) get this test's own temp dir: nbclient ends the
    # kernel at its own pace, so what it leaves is pytest's to remove, not the session's.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source.strip()) for source in CELLS]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    client.execute()
    out = "".join(
        o.get("text", "")
        for cell in notebook.cells
        for o in cell.outputs
        if o.output_type == "stream" and o.get("name") == "stdout"
    )
    assert "ParallelEnv (2, 3)" in out, out  # [] envs: TorchRL's [2, T]
    for name in (
        "MultiSyncCollector",
        "MultiAsyncCollector",
        "AsyncBatchedCollector",
        "DistributedDataCollector",
    ):
        assert f"{name} 16" in out, out
    assert "reported: worker 0: failed to start: ValueError: no env called Nope-v0 here" in out, out
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [p.cmdline() for p in left]
