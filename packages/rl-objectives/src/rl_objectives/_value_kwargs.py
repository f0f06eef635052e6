"""``default_value_kwargs``: TorchRL's default hyperparameters of each value estimator."""

from __future__ import annotations

from typing import Any

from rl_objectives._loss_base import ValueEstimators

__all__ = ["default_value_kwargs"]

_DEFAULTS: dict[str, dict[str, Any]] = {
    "TD(0)": {"gamma": 0.99, "differentiable": True},
    "TD(1)": {"gamma": 0.99, "differentiable": True},
    "TD(lambda)": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "GAE": {"gamma": 0.99, "lmbda": 0.95, "differentiable": True},
    "VTrace": {"gamma": 0.99, "differentiable": True},
}


def default_value_kwargs(value_type: ValueEstimators | str) -> dict[str, Any]:
    """The default keyword arguments of an estimator (TorchRL's ``default_value_kwargs``).

    Args:
        value_type: a :class:`ValueEstimators` member (or its value, e.g. ``"GAE"``), or
            ``"VTrace"``.

    Returns:
        A new dict (``gamma``, ``lmbda`` where the estimator has one, ``differentiable``).

    Raises:
        ValueError: ``value_type`` names no estimator.

    Examples:
        >>> default_value_kwargs(ValueEstimators.TDLambda)
        {'gamma': 0.99, 'lmbda': 0.95, 'differentiable': True}
    """
    key = value_type.value if isinstance(value_type, ValueEstimators) else value_type
    if key not in _DEFAULTS:
        raise ValueError(
            f"value_type: expected one of {sorted(_DEFAULTS)} or a ValueEstimators member, "
            f"received {value_type!r}"
        )
    return dict(_DEFAULTS[key])
