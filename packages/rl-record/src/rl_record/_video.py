"""Video encoding and decoding with PyAV (the ``[video]`` extra; ffmpeg ships in its wheel).

Frames are ``uint8`` arrays ``[T, H, W, C]`` (C = 1 or 3). mp4 files are H.264 in
``yuv420p``, which needs even sizes: odd heights or widths are padded by one black row or
column. A file is written under a temporary name and renamed when complete, so a failed
encode leaves no half-written video behind.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from rl_record._backend import require

__all__ = ["encode_gif", "read_video", "write_mp4"]


def _rgb(frames: np.ndarray) -> np.ndarray:
    if frames.shape[-1] == 1:
        frames = np.repeat(frames, 3, axis=-1)
    return np.ascontiguousarray(frames)


def _encode(container, codec: str, frames: np.ndarray, fps: int, pix_fmt: str) -> None:
    av = require("av", "video", "video encoding")
    stream = container.add_stream(codec, rate=int(fps))
    stream.height, stream.width = frames.shape[1], frames.shape[2]
    stream.pix_fmt = pix_fmt
    for frame in frames:
        for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


def write_mp4(path: str | os.PathLike, frames: np.ndarray, fps: int = 30) -> Path:
    """Encode ``frames`` (``uint8 [T, H, W, C]``) as an H.264 mp4 at ``path``.

    Returns:
        The path written.
    """
    av = require("av", "video", "write_mp4")
    frames = _rgb(frames)
    pad_h, pad_w = frames.shape[1] % 2, frames.shape[2] % 2
    if pad_h or pad_w:
        frames = np.pad(frames, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with av.open(str(tmp), "w", format="mp4") as container:
            _encode(container, "libx264", frames, fps, "yuv420p")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def encode_gif(frames: np.ndarray, fps: int = 30) -> bytes:
    """Encode ``frames`` (``uint8 [T, H, W, C]``) as an animated GIF (TensorBoard's video)."""
    av = require("av", "video", "encode_gif")
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="gif") as container:
        _encode(container, "gif", _rgb(frames), fps, "rgb8")
    return buffer.getvalue()


def read_video(path: str | os.PathLike) -> np.ndarray:
    """Decode a video file into ``uint8 [T, H, W, 3]`` (RGB).

    Examples:
        >>> import numpy as np, tempfile, pathlib
        >>> frames = np.zeros((5, 32, 48, 3), dtype=np.uint8)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     read_video(write_mp4(pathlib.Path(d) / "clip.mp4", frames, fps=10)).shape
        (5, 32, 48, 3)
    """
    av = require("av", "video", "read_video")
    with av.open(str(path)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(decoded) if decoded else np.zeros((0, 0, 0, 3), np.uint8)
