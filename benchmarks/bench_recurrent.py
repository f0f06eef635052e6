"""rl-recurrent: recurrent-mode backends vs ``nn.LSTM`` on the same data without resets.

Batch ``[32, 128]`` (time last), input 64, hidden 256, 2% resets. The limit is a plain
``nn.LSTM`` over the same inputs with no resets at all (it cannot honour them), timed in
the same run (CPU: one thread each). ``ratio`` is ours / limit (time; lower is better;
target for the best CPU backend, forward+backward: <= 1.3). Memory: bytes saved for the
backward (every tensor
autograd keeps, counted once per storage; plus CUDA peak on a GPU) with
``recurrent_recompute="full"`` vs ``"none"`` at T=1024.

Run: ``uv run --no-sync python benchmarks/bench_recurrent.py``.
"""

from __future__ import annotations

import statistics
import time

import torch
from rl_recurrent import LSTMModule, set_recurrent_mode
from tensordict import TensorDict

B, T, IN, HID, P_RESET = 32, 128, 64, 256, 0.02


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _time(fn, device: torch.device, reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _data(t: int, device: torch.device) -> TensorDict:
    gen = torch.Generator().manual_seed(0)
    is_init = torch.rand(B, t, 1, generator=gen) < P_RESET
    is_init[:, 0] = True
    td = TensorDict(
        {"obs": torch.randn(B, t, IN, generator=gen), "is_init": is_init}, [B, t]
    )  # fmt: skip
    return td.to(device)


def _module_runner(module, td, backward):
    def run():
        x = td["obs"].requires_grad_(backward)
        with set_recurrent_mode(True), torch.set_grad_enabled(backward):
            out = module(td.clone(False).set("obs", x))
        if backward:
            out["feat"].sum().backward()

    return run


def _lstm_runner(lstm, td, backward):
    def run():
        with torch.set_grad_enabled(backward):
            y, _ = lstm(td["obs"])
        if backward:
            y.sum().backward()

    return run


def _saved_bytes(fn) -> int:
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        seen[(t.untyped_storage().data_ptr(), t.device)] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _speed(device: torch.device, backends: list[str]) -> list[dict]:
    td = _data(T, device)
    module = LSTMModule(IN, HID, in_key="obs", out_key="feat", device=device)
    rows = []
    for backward, label in ((False, "forward"), (True, "forward+backward")):
        limit = _time(_lstm_runner(module.lstm, td, backward), device)
        for backend in backends:
            module.recurrent_backend = backend
            ours = _time(_module_runner(module, td, backward), device)
            rows.append({
                "figure": f"{backend} {label} [{B},{T}] {device.type}, ours/nn.LSTM no resets "
                          "(target <= 1.3 fwd+bwd)",
                "value": ours, "unit": "ms", "limit": limit, "ratio": ours / limit,
            })  # fmt: skip
    return rows


def _memory(device: torch.device) -> list[dict]:
    td = _data(1024, device)
    module = LSTMModule(IN, HID, in_key="obs", out_key="feat", device=device)
    module.recurrent_backend = "scan"

    def forward():
        with set_recurrent_mode(True):
            return module(td.clone(False))["feat"]

    sizes = {}
    for recompute in ("none", "full"):
        module.recurrent_recompute = recompute
        sizes[recompute] = _saved_bytes(forward) / 2**20
    return [{
        "figure": "scan saved-for-backward T=1024, recompute full/none (lower is better)",
        "value": sizes["full"], "unit": "MiB", "limit": sizes["none"],
        "ratio": sizes["full"] / sizes["none"],
    }]  # fmt: skip


def run() -> list[dict]:
    """Measure every backend available here against ``nn.LSTM`` without resets.

    CPU figures use one intra-op thread on both sides (stable on a shared machine).
    """
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = _speed(torch.device("cpu"), ["pad", "scan"])
    finally:
        torch.set_num_threads(threads)
    if torch.cuda.is_available():
        backends = ["pad", "scan"]
        try:
            import triton  # noqa: F401

            backends.append("triton")
        except ImportError:
            pass
        rows += _speed(torch.device("cuda"), backends)
    rows += _memory(torch.device("cpu"))
    return rows


if __name__ == "__main__":
    print(f"{'figure':92s} {'value':>10s} {'limit':>10s} {'ratio':>7s}")
    for row in run():
        print(
            f"{row['figure']:92s} {row['value']:8.1f}{row['unit']:>2s} "
            f"{row['limit']:8.1f}{row['unit']:>2s} {row['ratio']:7.2f}"
        )
