"""Argument checks shared by the functional estimators."""

from __future__ import annotations

import torch

from rl_objectives.exceptions import ShapeMismatchError, TimeDimError

__all__ = ["as_bool", "check_inputs", "check_time_dim", "check_same_shape", "coefficient"]


def check_time_dim(time_dim: int, ndim: int) -> int:
    """Return ``time_dim`` as a non-negative index into ``ndim`` dims, or raise."""
    if not isinstance(time_dim, int) or not -ndim <= time_dim < ndim:
        raise TimeDimError(
            f"time_dim must be an int in [-{ndim}, {ndim - 1}] for inputs with {ndim} dims, "
            f"got {time_dim!r}"
        )
    return time_dim % ndim


def check_same_shape(reference: str, tensors: dict[str, torch.Tensor | None]) -> None:
    """Raise :class:`ShapeMismatchError` unless every tensor has the reference's shape."""
    shape = tensors[reference].shape
    for name, tensor in tensors.items():
        if tensor is not None and tensor.shape != shape:
            listing = ", ".join(
                f"{k}={tuple(v.shape)}" for k, v in tensors.items() if v is not None
            )
            raise ShapeMismatchError(
                f"{name} must have the shape of {reference} {tuple(shape)}, "
                f"got {tuple(tensor.shape)} (shapes: {listing})"
            )


def as_bool(flag: torch.Tensor) -> torch.Tensor:
    """A done/terminated flag as a bool tensor (float 0/1 flags are accepted)."""
    return flag if flag.dtype == torch.bool else flag != 0


def coefficient(
    name: str, value: float | torch.Tensor, like: torch.Tensor
) -> float | torch.Tensor:
    """Check a scalar or tensor ``gamma``/``lmbda`` against the data it multiplies."""
    if not isinstance(value, torch.Tensor):
        return float(value)
    if value.numel() == 1:
        return value.to(like.dtype).reshape(())
    try:
        fits = torch.broadcast_shapes(value.shape, like.shape) == like.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ShapeMismatchError(
            f"{name} must be a float or a tensor broadcastable to {tuple(like.shape)}, "
            f"got shape {tuple(value.shape)}"
        )
    return value.to(like.dtype)


def check_inputs(
    gamma: float | torch.Tensor,
    lmbda: float | torch.Tensor | None,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor | None,
    time_dim: int,
    **values: torch.Tensor,
) -> tuple:
    """The checks every estimator starts with, in one order (so one set of messages).

    ``values`` (keyword order kept in the messages), ``done`` and ``terminated`` must be
    shaped like ``reward``; ``time_dim`` must index its dims; ``gamma`` and ``lmbda``
    (``None``: the estimator has none) must broadcast to it.

    Returns:
        ``(gamma, lmbda, done, terminated, time_dim)``: the coefficients as floats or
        tensors of ``reward``'s dtype, the flags as bool (``terminated`` is ``done`` when
        ``None``), ``time_dim`` non-negative.
    """
    check_same_shape(
        "reward", {"reward": reward, **values, "done": done, "terminated": terminated}
    )
    time_dim = check_time_dim(time_dim, reward.ndim)
    done = as_bool(done)
    terminated = done if terminated is None else as_bool(terminated)
    gamma = coefficient("gamma", gamma, reward)
    lmbda = None if lmbda is None else coefficient("lmbda", lmbda, reward)
    return gamma, lmbda, done, terminated, time_dim
