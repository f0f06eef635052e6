"""Rollout storage layout: the copies of one observation (issue 42) and the write layouts
(issue 24).

**Copies** (:func:`count_copies`, issue 42): the PPO CartPole pipeline of
``examples/ppo_cartpole.py`` (``GymEnv`` x16 with ``StepCounter``, ``InitTracker``,
``RewardSum``; ``Collector`` -> ``GAE`` -> ``TensorDictReplayBuffer`` over a
``LazyTensorStorage`` with ``SamplerWithoutReplacement`` -> the minibatch ``ClipPPOLoss``
reads), with one observation traced by its storage pointer (numpy's ``__array_interface__``
data, ``tensor.untyped_storage().data_ptr()``) and its value from the array the simulator
returns to the minibatch tensor. Each hop is a view (same storage) or a copy (a new storage
holding the same values); ``copies: N`` counts the copies on that chain, the rollout batch's
two stores of it (``("next", "obs")[t]`` and ``obs[t+1]``) included. The simulator's array
is seen by replacing the gymnasium vector env's ``step`` on the instance with a recorder
that returns what it returns; the policy input by a forward pre-hook on the actor. ``uv run
python benchmarks/bench_layout.py --copies`` prints only this (a second).

**Layouts** (:func:`run`): time-major ``[T, *B]`` writes vs time-last ``[*B, T]``.

The data model hands a rollout out as ``[*B, T]`` (time last). Two ways to fill it step by
step, each timed per rollout of ``T`` steps with numpy slice assignments (what both
rollout writers do on the CPU), into storage allocated fresh for every rollout (a training
loop's new batch: first-touch page faults included):

* **time-major**: allocate ``[T, *B, *event]`` and copy the env's ``[*B, *event]`` buffer
  into ``storage[t]``, one contiguous block a step; hand out a ``permute`` view (no copy).
  A consumer that needs the ``[*B, T]`` rows contiguous (``reshape(-1)`` into a replay
  buffer, say) pays one more copy: timed as **time-major + copy**;
* **time-last**: allocate ``[*B, T, *event]`` and copy into ``storage[:, t]``: ``B`` blocks
  of one event each, ``T`` events apart.

Ratios are time-last over time-major (above 1: time-major is cheaper) and time-last over
time-major + copy (above 1: time-major stays cheaper even when the consumer wants
contiguous time-last rows). Cases: the shapes of the examples (CartPole x16, Atari x8
frames, one MuJoCo env) and a numpy-vectorised CartPole of 4096 envs. Medians over
``REPEAT`` rollouts, interleaved; ``uv run python benchmarks/bench_layout.py`` takes
under a minute.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

REPEAT = 15

# name -> (envs B, event shape, dtype, steps T)
CASES = {
    "CartPole x16 (float32 [4], T=32)": (16, (4,), np.float32, 32),
    "CartPole x4096 (float32 [4], T=32)": (4096, (4,), np.float32, 32),
    "Atari x8 (uint8 [4, 84, 84], T=128)": (8, (4, 84, 84), np.uint8, 128),
    "MuJoCo x1 (float32 [17], T=2048)": (1, (17,), np.float32, 2048),
}


def _time_major(src: np.ndarray, steps: int, copy: bool) -> float:
    start = time.perf_counter()
    storage = np.empty((steps, *src.shape), src.dtype)
    for t in range(steps):
        storage[t] = src
    if copy:
        np.ascontiguousarray(np.moveaxis(storage, 0, 1))
    return time.perf_counter() - start


def _time_last(src: np.ndarray, steps: int) -> float:
    start = time.perf_counter()
    storage = np.empty((src.shape[0], steps, *src.shape[1:]), src.dtype)
    for t in range(steps):
        storage[:, t] = src
    return time.perf_counter() - start


def _row(figure: str, value: float, limit: float) -> dict:
    return {"figure": figure, "value": value, "unit": "s", "limit": limit, "ratio": value / limit}


def run() -> list[dict]:
    rows = []
    for name, (envs, event, dtype, steps) in CASES.items():
        src = (np.arange(envs * int(np.prod(event))) % 251).astype(dtype).reshape(envs, *event)
        times: dict[str, list[float]] = {"major": [], "major_copy": [], "last": []}
        for _ in range(REPEAT + 1):  # the first round warms up, the rest count
            times["major"].append(_time_major(src, steps, copy=False))
            times["major_copy"].append(_time_major(src, steps, copy=True))
            times["last"].append(_time_last(src, steps))
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        rows.append(_row(f"{name}: time-last writes / time-major writes (fresh storage)",
                         med["last"], med["major"]))
        rows.append(_row(f"{name}: time-last writes / time-major writes + one copy to [B, T]",
                         med["last"], med["major_copy"]))
    return rows


def _ptr(x: Any) -> int:
    """The address of the memory ``x`` lives in (a numpy array or a tensor)."""
    if isinstance(x, np.ndarray):
        base = x
        while isinstance(base.base, np.ndarray):
            base = base.base
        return base.__array_interface__["data"][0]
    return x.untyped_storage().data_ptr()


def _holds(x: Any, value: np.ndarray) -> bool:
    """Whether some row of ``x`` (``[..., F]``) equals ``value`` (``[F]``) exactly."""
    arr = np.asarray(x.detach().cpu() if not isinstance(x, np.ndarray) else x)
    return bool((arr.reshape(-1, value.shape[-1]) == value).all(-1).any())


def _pipeline(num_envs: int, steps: int, minibatch: int) -> dict:
    """``examples/ppo_cartpole.py``'s objects (its defaults), with the two recorders."""
    import torch
    from rl_collectors import Collector
    from rl_envs import GymEnv, InitTracker, RewardSum, StepCounter, TransformedEnv
    from rl_modules import MLP, ProbabilisticActor, ValueOperator
    from rl_objectives import GAE, ClipPPOLoss
    from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
    from tensordict.nn import TensorDictModule

    torch.manual_seed(0)
    base = GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=True)
    env = TransformedEnv(base, StepCounter())
    env.append_transform(InitTracker())
    env.append_transform(RewardSum())
    env.set_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(MLP(4, 2, num_cells=64, depth=2), ["observation"], ["logits"]),
        ["logits"], spec=env.action_spec, distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(MLP(4, 1, num_cells=64, depth=2))
    rec: dict = {"sim": [], "seen": []}
    venv = base.env
    sim_step = venv.step

    def recording_step(action: Any) -> tuple:
        out = sim_step(action)
        rec["sim"].append((out[0], out[0].copy(), out[2] | out[3]))
        return out

    def seen(module: Any, args: tuple) -> None:
        root, nxt = base.buffers()
        troot, _ = env.buffers()
        batch = rec["collector"].buffer if "collector" in rec else None
        places = {
            "GymEnv next buffer": nxt.get("observation"),
            "GymEnv root buffer": root.get("observation"),
            "TransformedEnv root buffer": troot.get("observation"),
            "the Collector's batch, ('next', 'observation')":
                None if batch is None else batch.get(("next", "observation")),
            "the Collector's batch, 'observation'":
                None if batch is None else batch.get("observation"),
            "policy input (what the actor reads)": args[0].get("observation"),
        }
        rec["seen"].append({where: None if x is None else (x.clone(), _ptr(x))
                            for where, x in places.items()})

    frames = num_envs * steps
    collector = Collector(env, actor, frames_per_batch=frames, total_frames=frames)
    venv.step = recording_step  # on the instance: the simulator itself is unchanged
    actor.register_forward_pre_hook(seen)
    rec["sim"].clear()
    rec["seen"].clear()
    rec["collector"] = collector
    rec["batch"] = next(iter(collector))
    rec["gae"] = GAE(gamma=0.98, lmbda=0.8, value_network=critic, average_gae=True)
    rec["buffer"] = TensorDictReplayBuffer(
        storage=LazyTensorStorage(frames), sampler=SamplerWithoutReplacement(),
        batch_size=minibatch,
    )
    rec["loss"] = ClipPPOLoss(actor, critic, loss_critic_type="l2")
    return rec


def _hop(hops: list, where: str, x: Any, value: np.ndarray) -> None:
    if not _holds(x, value):
        raise RuntimeError(f"the traced observation is not in {where}")
    ptr = _ptr(x)
    kind = "view" if any(ptr == h[2] for h in hops) else "copy"
    hops.append((where, "start" if not hops else kind, ptr))


def count_copies(num_envs: int = 16, steps: int = 32, minibatch: int = 256) -> dict:
    """Trace one observation from the simulator's array to the loss's minibatch tensor.

    Returns:
        ``{"copies": N, "hops": [(where, "start" | "view" | "copy", address)]}``: a hop is
        a view when an earlier hop holds the same memory, else a copy (new memory holding
        the same values); ``N`` counts the copies.
    """
    import torch

    rec = _pipeline(num_envs, steps, minibatch)
    s = steps // 2  # a step in the middle of the batch; a row that did not finish there
    sim_arr, value_all, done = rec["sim"][s]
    row = int(np.flatnonzero(~np.asarray(done))[0])
    value = value_all[row]
    hops: list = []
    _hop(hops, "simulator's array (the vector env's step return)", sim_arr, value)
    # where it is as the policy is called at step s + 1 (the batch's root slot s + 1 is
    # written by then on either path: by the env, or by the copy after that call, seen
    # at step s + 2), in the order the data flows
    seen, later = rec["seen"][s + 1], rec["seen"][s + 2]
    for where, found in seen.items():
        if where == "the Collector's batch, 'observation'":
            found = later[where]
        if found is None or not _holds(found[0], value):
            continue
        ptr = found[1]
        hops.append((where, "view" if any(ptr == h[2] for h in hops) else "copy", ptr))
    if not any(w == "policy input (what the actor reads)" for w, _, _ in hops):
        raise RuntimeError("the traced observation is not in the policy input")
    batch = rec["batch"]
    _hop(hops, "the batch the Collector yields", batch.get("observation"), value)
    with torch.no_grad():
        rec["gae"](batch)
    _hop(hops, "the batch after GAE", batch.get("observation"), value)
    flat = batch.reshape(-1).to("cpu")
    _hop(hops, "batch.reshape(-1).to(device)", flat.get("observation"), value)
    buffer = rec["buffer"]
    buffer.extend(flat)
    state = buffer.storage.state_dict()
    leaf = state["leaves"][[tuple(k) if not isinstance(k, str) else (k,)
                            for k in state["layout"]["keys"]].index(("observation",))]
    _hop(hops, "replay storage (LazyTensorStorage)", leaf, value)
    for _ in range(len(buffer) // minibatch):  # one epoch of minibatches: one holds it
        sample = buffer.sample(minibatch)
        if _holds(sample.get("observation"), value):
            break
    _hop(hops, "the minibatch ClipPPOLoss reads (buffer.sample)", sample.get("observation"),
         value)
    rec["loss"](sample)  # the loss runs on that very minibatch
    rec["collector"].shutdown()
    n = sum(kind == "copy" for _, kind, _ in hops)
    return {"copies": n, "hops": hops}


def print_copies(result: dict) -> None:
    for where, kind, _ in result["hops"]:
        print(f"  {kind:5s} {where}")
    print(f"copies: {result['copies']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", action="store_true", help="only the copy count")
    args = parser.parse_args()
    print_copies(count_copies())
    if args.copies:
        raise SystemExit(0)
    print(f"{'figure':92s} {'value':>10s} {'limit':>10s} {'ratio':>7s}")
    for r in run():
        print(f"{r['figure']:92s} {r['value']:10.6f} {r['limit']:10.6f} {r['ratio']:7.3f}")
