"""Named ranges of rl-replay reach a torch.profiler trace when RL_PROFILING=1.

``ReplayBuffer.extend`` / ``sample`` / ``update_priority`` / ``dumps`` / ``loads``, and one
``<Storage>.set`` per storage class for its writes (a memmap's write-through to its files
included). Not armed, the methods are the plain functions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json, sys, tempfile
import torch
from tensordict import TensorDict
from rl_replay import (CompressedStorage, LazyMemmapStorage, LazyTensorStorage, ListStorage,
    PrioritizedSampler, ReplayBuffer, TensorDictReplayBuffer)

data = TensorDict({"obs": torch.arange(8.0).unsqueeze(-1)}, [8])
with tempfile.TemporaryDirectory() as tmp, torch.profiler.profile() as prof:
    for storage in (LazyTensorStorage(16), LazyMemmapStorage(16, scratch_dir=tmp + "/m"),
                    CompressedStorage(16)):
        rb = TensorDictReplayBuffer(storage=storage, batch_size=4)
        rb.extend(data)
        rb.sample()
    ReplayBuffer(storage=ListStorage(4)).extend([1, 2])
    prb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=4,
                                 sampler=PrioritizedSampler(16, alpha=0.7, beta=0.5))
    prb.extend(data)
    prb.update_priority(torch.arange(4), torch.ones(4))
    prb.dumps(tmp + "/ckpt")
    prb.loads(tmp + "/ckpt")
names = [e.name for e in prof.events()]
print(json.dumps({n: names.count(n) for n in set(names) if not n.startswith("aten::")}))
"""

EXPECTED = {
    "ReplayBuffer.extend": 5,
    "ReplayBuffer.sample": 3,
    "ReplayBuffer.update_priority": 1,
    "ReplayBuffer.dumps": 1,
    "ReplayBuffer.loads": 1,
    "LazyTensorStorage.set": 2,
    "LazyMemmapStorage.set": 1,
    "CompressedStorage.set": 1,
    "ListStorage.set": 1,
}


@pytest.mark.timeout(300)
def test_ranges_recorded_when_armed() -> None:
    env = {**os.environ, "RL_PROFILING": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=280
    )
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert {name: counts.get(name, 0) for name in EXPECTED} == EXPECTED
    assert "Storage.set" not in counts  # named after the concrete class only


def test_unarmed_methods_are_plain_functions() -> None:
    import rl_profiling
    from rl_replay import LazyMemmapStorage, ReplayBuffer, Storage

    if rl_profiling.ARMED:
        pytest.skip("this process is armed")
    assert LazyMemmapStorage.set is Storage.set and "set" not in LazyMemmapStorage.__dict__
    assert not hasattr(ReplayBuffer.update_priority, "__wrapped__")
