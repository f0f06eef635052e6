"""``MaskedCategorical``: a categorical distribution over the actions a mask allows.

``OneHotCategorical`` and ``Delta`` are ``tensordict.nn``'s, re-exported by the package.
"""

from __future__ import annotations

import torch
from torch import distributions as D

__all__ = ["MaskedCategorical"]


def _mask_from_indices(indices: torch.Tensor, n: int) -> torch.Tensor:
    mask = torch.zeros((*indices.shape[:-1], n), dtype=torch.bool, device=indices.device)
    return mask.scatter_(-1, indices.long(), True)


class MaskedCategorical(D.Categorical):
    """A categorical distribution whose masked actions have probability exactly 0.

    Masked logits are set to ``neg_inf`` before normalisation (``probs`` are multiplied by
    the mask), so a masked action is never sampled, is never the ``mode`` and has
    ``log_prob`` equal to ``-inf``; ``entropy`` sums over the allowed actions only and its
    gradient stays finite.

    Args:
        logits: unnormalised log-probabilities, ``[*batch, n]``.
        probs: probabilities instead of ``logits`` (one of the two).
        mask: bool ``[*batch, n]``, ``True`` where the action is allowed (the env's
            ``action_mask``).
        indices: the allowed actions' indices instead of ``mask``, ``[*batch, k]``.
        neg_inf: the logit given to masked actions.
        padding_value: an action value standing for "no action" (e.g. padded steps): its
            ``log_prob`` is 0.

    Raises:
        ValueError: neither or both of ``mask`` / ``indices``; a mask of another shape
            than the logits or not bool; a row with no allowed action.

    Examples:
        >>> import torch
        >>> d = MaskedCategorical(logits=torch.zeros(2, 3),
        ...                       mask=torch.tensor([[True, False, True], [False, True, False]]))
        >>> d.probs
        tensor([[0.5000, 0.0000, 0.5000],
                [0.0000, 1.0000, 0.0000]])
        >>> d.log_prob(torch.tensor([1, 1]))
        tensor([-inf, 0.])
    """

    def __init__(
        self,
        logits: torch.Tensor | None = None,
        probs: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        indices: torch.Tensor | None = None,
        neg_inf: float = float("-inf"),
        padding_value: int | None = None,
    ) -> None:
        if (logits is None) == (probs is None):
            raise ValueError("MaskedCategorical: give exactly one of logits and probs")
        params = logits if logits is not None else probs
        if (mask is None) == (indices is None):
            raise ValueError("MaskedCategorical: give exactly one of mask and indices")
        if mask is None:
            mask = _mask_from_indices(indices, params.shape[-1])
        if mask.dtype != torch.bool or mask.shape != params.shape:
            raise ValueError(
                f"MaskedCategorical: mask must be bool with the logits' shape "
                f"{tuple(params.shape)}, received {mask.dtype} {tuple(mask.shape)}"
            )
        if not bool(mask.any(-1).all()):
            rows = (~mask.any(-1)).nonzero()[:5].tolist()
            raise ValueError(
                f"MaskedCategorical: every row needs an allowed action; rows {rows} have none"
            )
        self._mask = mask
        self.padding_value = padding_value
        if logits is not None:
            super().__init__(logits=logits.masked_fill(~mask, neg_inf), validate_args=False)
        else:
            super().__init__(probs=probs * mask, validate_args=False)

    @property
    def mask(self) -> torch.Tensor:
        return self._mask

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self.padding_value is None:
            return super().log_prob(value)
        padded = value == self.padding_value
        lp = super().log_prob(value.masked_fill(padded, 0))
        return lp.masked_fill(padded, 0.0)

    def entropy(self) -> torch.Tensor:
        # finite logits where masked: 0 * -inf would be nan, and so would its gradient
        logits = self.logits.clamp_min(torch.finfo(self.logits.dtype).min)
        return -(self.probs * logits).sum(-1)

    @property
    def deterministic_sample(self) -> torch.Tensor:
        return self.mode
