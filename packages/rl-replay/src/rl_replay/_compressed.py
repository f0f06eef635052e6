"""``CompressedStorage``: each row compressed on write, decompressed on read.

A row's leaves are laid side by side as bytes and compressed with a named codec:
``"zstd"`` (the ``zstandard`` package, when installed) or ``"zlib"`` (stdlib). The codec
is stored in the state, so a checkpoint says how it was written. Worth it for large,
compressible rows (images); for small rows the per-row codec call dominates.
"""

from __future__ import annotations

import importlib
import importlib.util
import zlib
from typing import Any

import torch

from rl_replay._layout import Layout, batch_rows
from rl_replay._storage import Storage
from rl_replay.exceptions import StorageLayoutError

__all__ = ["CompressedStorage"]

CODECS = ("zstd", "zlib")


def _codec(name: str, level: int) -> tuple[Any, Any]:
    if name == "zlib":
        return (lambda b: zlib.compress(b, level)), zlib.decompress
    if importlib.util.find_spec("zstandard") is None:
        raise ImportError(
            "codec: 'zstd' needs the zstandard package (pip install zstandard); "
            "use codec='zlib' (stdlib) instead"
        )
    zstd = importlib.import_module("zstandard")
    comp = zstd.ZstdCompressor(level=level)
    decomp = zstd.ZstdDecompressor()
    return comp.compress, decomp.decompress


class CompressedStorage(Storage):
    """Rows of a TensorDict or Tensor kept compressed in memory, one blob per row.

    Args:
        max_size: number of rows kept.
        codec: ``"zstd"``, ``"zlib"`` or ``"auto"`` (zstd when ``zstandard`` is
            installed, else zlib). The chosen name is :attr:`codec`.
        level: compression level passed to the codec.

    Raises:
        ValueError: an unknown codec.
        ImportError: ``codec="zstd"`` without the ``zstandard`` package.

    Examples:
        >>> import torch
        >>> from rl_replay import CompressedStorage
        >>> s = CompressedStorage(10, codec="zlib")
        >>> s.set(torch.arange(2), torch.zeros(2, 84, 84, dtype=torch.uint8))
        >>> s.get(torch.tensor([1])).shape, s.compressed_bytes() < 2 * 84 * 84
        (torch.Size([1, 84, 84]), True)
    """

    def __init__(self, max_size: int, *, codec: str = "auto", level: int = 3) -> None:
        super().__init__(max_size)
        if codec == "auto":
            codec = "zstd" if importlib.util.find_spec("zstandard") is not None else "zlib"
        if codec not in CODECS:
            raise ValueError(f"codec: expected one of {CODECS} or 'auto', got {codec!r}")
        self.codec, self.level = codec, int(level)
        self._compress, self._decompress = _codec(codec, self.level)
        self.layout: Layout | None = None
        self._blobs: list[bytes | None] = [None] * max_size
        self._row_bytes: list[int] = []

    def rows(self, data: Any) -> int:
        return batch_rows(data, 1)[0]

    def prepare(self, data: Any) -> None:
        if self.layout is None:
            layout = Layout.of(data, 1)
            self.layout = layout
            self._row_bytes = [
                torch.empty(shp, dtype=dt).nbytes
                for shp, dt in zip(layout.shapes, layout.dtypes, strict=False)
            ]

    def _write(self, index: torch.Tensor, data: Any) -> None:
        self.prepare(data)
        leaves = self.layout.check(data, 1)
        n = self.rows(data)
        if n != len(index):
            raise StorageLayoutError(f"data: expected {len(index)} rows, got {n}")
        raw = torch.cat(
            [t.detach().cpu().contiguous().view(n, -1).view(torch.uint8) for t in leaves], dim=1
        ).numpy()
        blobs = [self._compress(row.tobytes()) for row in raw]
        for i, blob in zip(index.tolist(), blobs, strict=False):
            self._blobs[i] = blob

    def get(self, index: torch.Tensor) -> Any:
        if self.layout is None:
            raise IndexError("get: the storage is empty (nothing was written yet)")
        raw = b"".join(self._decompress(self._blobs[i]) for i in index.tolist())
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(len(index), -1)
        out, start = [], 0
        for nbytes, shp, dt in zip(
            self._row_bytes, self.layout.shapes, self.layout.dtypes, strict=False
        ):
            # a copy, not .contiguous(): one row's slice is already contiguous but starts at
            # an offset that an 8-byte dtype cannot be viewed from
            chunk = flat[:, start : start + nbytes].clone(memory_format=torch.contiguous_format)
            out.append(chunk.view(dt).view(len(index), *shp))
            start += nbytes
        return self.layout.build(out, index.shape, torch.device("cpu"))

    def compressed_bytes(self) -> int:
        """Total size of the stored blobs."""
        return sum(len(b) for b in self._blobs if b is not None)

    def empty(self) -> None:
        super().empty()
        self._blobs = [None] * self.max_size

    def state_dict(self) -> dict:
        return {
            "codec": self.codec,
            "level": self.level,
            "layout": None if self.layout is None else self.layout.state(),
            "blobs": list(self._blobs),
            "filled": self._filled,
        }

    def load_state_dict(self, state: dict) -> None:
        self.codec, self.level = state["codec"], int(state["level"])
        self._compress, self._decompress = _codec(self.codec, self.level)
        self.layout = None
        if state["layout"] is not None:
            self.layout = Layout.from_state(state["layout"])
            self._row_bytes = [
                torch.empty(s, dtype=d).nbytes
                for s, d in zip(self.layout.shapes, self.layout.dtypes, strict=False)
            ]
        self._blobs = list(state["blobs"])
        self._filled = int(state["filled"])
