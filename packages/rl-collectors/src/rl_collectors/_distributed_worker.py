"""The collector ranks of the torch.distributed collectors, and their message format.

Wiring (one place):

- :func:`run_rank` (the target a launcher starts): joins the trainer's ``TCPStore``,
  writes ``rl_collectors/ready/{rank}``, joins the process group, serves, and destroys
  the group on every path.
- :func:`serve_distributed_collector` (ranks > 0 of a group you initialised, e.g. under
  torchrun): receives the spec from rank 0, builds a :class:`PackedHostRuntime`, then
  answers commands until ``STOP`` or until the trainer's connection closes.
- :class:`PackedHostRuntime`: the one host runtime (``_host.py``) with its batches packed
  in a flat byte tensor; shared with the RPC collector.
- Messages: trainer -> rank: an int64 ``[op, a, b]`` header (``TAG_CMD``), then a byte
  payload (``TAG_CMD_DATA``) for weights or a pickled call; rank -> trainer: an int64
  ``[kind, n]`` header (``TAG_HDR``), then the flat batch (``n`` = steps) or ``n``
  pickled bytes (``TAG_DATA``). Every wait has an explicit timeout (gloo's default is the
  group's timeout, and a timed-out wait closes the connection).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import traceback
from typing import Any

import torch
import torch.distributed as dist
from rl_envs.processes import dumps as portable_dumps
from rl_envs.processes import loads as portable_loads

from rl_collectors._flat import FlatLayout
from rl_collectors._host import HostRuntime, HostSpec

__all__ = ["PackedHostRuntime", "run_rank", "serve_distributed_collector"]

logger = logging.getLogger(__name__)

OP_STOP, OP_COLLECT, OP_CALL, OP_SPEC = 0, 1, 2, 3
KIND_BATCH, KIND_REPLY, KIND_ERROR, KIND_READY = 1, 2, 3, 4
TAG_CMD, TAG_CMD_DATA, TAG_HDR, TAG_DATA = 11, 12, 13, 14
IDLE = datetime.timedelta(days=30)  # a rank waits this long for the trainer's next command
READY_KEY = "rl_collectors/ready/{rank}"


def dumps(obj: Any, what: str = "the message") -> torch.Tensor:
    """Pickle ``obj`` into a uint8 tensor: by reference where the rank can import it, by
    value (cloudpickle) for what was defined in ``__main__``, lambdas and closures."""
    return torch.frombuffer(bytearray(portable_dumps(obj, what)), dtype=torch.uint8)


def loads(tensor: torch.Tensor, what: str = "the message") -> Any:
    return portable_loads(tensor.numpy().tobytes(), what)


def send(tensor: torch.Tensor, dst: int, tag: int, timeout: datetime.timedelta) -> None:
    dist.isend(tensor, dst, tag=tag).wait(timeout)


def recv(tensor: torch.Tensor, src: int, tag: int, timeout: datetime.timedelta) -> torch.Tensor:
    dist.irecv(tensor, src, tag=tag).wait(timeout)
    return tensor


def header(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class PackedHostRuntime(HostRuntime):
    """The host runtime of a rank or an RPC worker: batches packed in one flat byte
    tensor (``FlatLayout``), weights unpacked from one (``spec.weights``: their layout)."""

    def __init__(self, spec: HostSpec) -> None:
        super().__init__(spec)
        self.weights_layout: FlatLayout | None = spec.weights
        self.layout = FlatLayout.of(self.template)
        self._flat = self.layout.empty()

    def info(self) -> dict[str, Any]:
        return {**super().info(), "layout": self.layout}

    def collect(self, steps: int) -> torch.Tensor:
        """Collect ``steps`` steps; returns the batch packed in a flat byte buffer."""
        view = self.batch(steps)
        full = steps == self.layout.steps
        layout = self.layout if full else self.layout.with_steps(steps)
        flat = self._flat if full else layout.empty()
        layout.pack(view, flat)
        return flat


def _reply(kind: int, obj: Any, timeout: datetime.timedelta) -> None:
    data = dumps(obj)
    send(header(kind, data.numel()), 0, TAG_HDR, timeout)
    send(data, 0, TAG_DATA, timeout)


def _recv_bytes(n: int, timeout: datetime.timedelta) -> torch.Tensor:
    return recv(torch.empty(n, dtype=torch.uint8), 0, TAG_CMD_DATA, timeout)


def _handle(
    runtime: PackedHostRuntime, op: int, a: int, b: int, timeout: datetime.timedelta
) -> None:
    if op == OP_COLLECT:
        if b:  # newer weights follow: a version number, then the flat weights
            flat = _recv_bytes(runtime.weights_layout.nbytes, timeout)
            runtime.load_weights(runtime.weights_layout.unpack(flat), b)
        try:
            flat = runtime.collect(a)
        except Exception:
            _reply(KIND_ERROR, traceback.format_exc(), timeout)
            return
        send(header(KIND_BATCH, a), 0, TAG_HDR, timeout)
        send(flat, 0, TAG_DATA, timeout)
        return
    name, args = loads(_recv_bytes(a, timeout))
    try:
        result = runtime.call(name, args)
    except Exception:
        _reply(KIND_ERROR, traceback.format_exc(), timeout)
        return
    _reply(KIND_REPLY, result, timeout)


def serve_distributed_collector(timeout: float = 300.0) -> None:
    """Serve as a collector rank of a ``DistributedDataCollector`` built on rank 0.

    Call it on every rank but 0 of a process group you initialised yourself (for
    example under ``torchrun``), while rank 0 builds the collector with ``launcher=None``.
    It returns when the collector on rank 0 shuts down (or its connection closes).

    Args:
        timeout: seconds a single message may take once it has started.

    Raises:
        RuntimeError: the default process group is not initialised, or this is rank 0.
    """
    if not dist.is_initialized() or dist.get_rank() == 0:
        raise RuntimeError(
            "serve_distributed_collector: expected an initialised process group and a rank > 0, "
            f"got initialised={dist.is_initialized()}"
            + (f", rank={dist.get_rank()}" if dist.is_initialized() else "")
        )
    wait = datetime.timedelta(seconds=timeout)
    rank = dist.get_rank()
    cmd = torch.empty(3, dtype=torch.int64)
    recv(cmd, 0, TAG_CMD, IDLE)
    data = _recv_bytes(int(cmd[1]), wait)
    try:  # loading the spec runs the user's code too: its errors go back to the trainer
        runtime = PackedHostRuntime(
            loads(data, "the collector spec (create_env_fn, policy, collector_kwargs)")
        )
    except Exception:
        _reply(KIND_ERROR, traceback.format_exc(), wait)
        return
    try:
        _reply(KIND_READY, runtime.info(), wait)
        while True:
            try:
                recv(cmd, 0, TAG_CMD, IDLE)
            except RuntimeError:  # the trainer is gone: nothing left to serve
                logger.warning("rank %d: lost the trainer's connection; stopping", rank)
                return
            op, a, b = (int(x) for x in cmd)
            if op == OP_STOP:
                return
            _handle(runtime, op, a, b, wait)
    finally:
        runtime.close()


def run_rank(
    addr: str, port: int, rank: int, world_size: int, backend: str = "gloo", timeout: float = 300.0
) -> None:
    """Launcher target: join the trainer at ``addr:port`` as ``rank``, serve, tear down."""
    wait = datetime.timedelta(seconds=timeout)
    store = dist.TCPStore(addr, port, world_size, is_master=False, timeout=wait)
    store.set(READY_KEY.format(rank=rank), f"{socket.gethostname()}:{os.getpid()}")
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=wait)
    try:
        serve_distributed_collector(timeout)
    except RuntimeError as err:  # the trainer vanished mid-message
        logger.warning("rank %d: %s", rank, err)
    finally:
        dist.destroy_process_group()
