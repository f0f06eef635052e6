"""Dreamer's recurrent state-space model: the prior and posterior TensorDict modules.

The model (Hafner et al., 2019, "Learning Latent Dynamics for Planning from Pixels";
2020, "Dream to Control") keeps a deterministic belief ``h_t`` and a stochastic state
``s_t``::

    h_{t+1} = GRUCell(ELU(W [s_t, a_t]), h_t)                  # RSSMPrior
    p(s_{t+1} | h_{t+1})          = Latent(MLP(h_{t+1}))        # RSSMPrior
    q(s_{t+1} | h_{t+1}, e_{t+1}) = Latent(MLP([h_{t+1}, e_{t+1}]))  # RSSMPosterior

``Latent`` is a diagonal Normal (``std = softplus(raw) + scale_lb``, reparameterised
sample ``mean + std * noise``) or, as in DreamerV2, ``num_categoricals`` categoricals of
``num_classes`` classes sampled as straight-through one-hots (Gumbel-max noise).

Every module has a tensor-level ``step`` that takes its noise as an argument: the
rollout draws the noise of all steps up front, so the loop, scan and compiled rollouts
see the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor, nn
from torch.nn import functional as F

from rl_recurrent._keys import NEXT

__all__ = ["RSSMPosterior", "RSSMPrior", "make_latent"]

_LATENTS = ("normal", "categorical")


class _NormalLatent:
    """Diagonal Normal: raw ``[..., 2 * state_dim]`` -> (mean, std), sample."""

    kind = "normal"
    param_names = ("mean", "std")

    def __init__(self, state_dim: int, scale_lb: float) -> None:
        self.state_dim = state_dim
        self.raw_dim = 2 * state_dim
        self.scale_lb = scale_lb

    def sample_noise(self, shape: Sequence[int], **kwargs: Any) -> Tensor:
        return torch.randn(*shape, self.state_dim, **kwargs)

    def __call__(self, raw: Tensor, noise: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        mean, std = raw.chunk(2, -1)
        std = F.softplus(std) + self.scale_lb
        return (mean, std), mean + std * noise


class _CategoricalLatent:
    """``num_categoricals`` one-hot categoricals, straight-through gradients (DreamerV2)."""

    kind = "categorical"
    param_names = ("logits",)

    def __init__(self, num_categoricals: int, num_classes: int) -> None:
        self.shape = (num_categoricals, num_classes)
        self.state_dim = self.raw_dim = num_categoricals * num_classes

    def sample_noise(self, shape: Sequence[int], **kwargs: Any) -> Tensor:
        """Gumbel noise ``-log(-log(u))``, one per logit."""
        u = torch.rand(*shape, self.state_dim, **kwargs)
        tiny = torch.finfo(u.dtype).tiny
        return -torch.log(-torch.log(u.clamp(tiny, 1.0 - 1e-7)))

    def __call__(self, raw: Tensor, noise: Tensor) -> tuple[tuple[Tensor, ...], Tensor]:
        logits = raw.unflatten(-1, self.shape)
        index = (logits + noise.unflatten(-1, self.shape)).argmax(-1)
        one_hot = F.one_hot(index, self.shape[1]).to(logits.dtype)
        probs = logits.softmax(-1)
        state = one_hot + probs - probs.detach()
        return (raw,), state.flatten(-2)


def make_latent(
    latent: str, state_dim: int, scale_lb: float, num_classes: int
) -> _NormalLatent | _CategoricalLatent:
    """Build the latent head of a prior or posterior (validated arguments)."""
    if latent not in _LATENTS:
        raise ValueError(f"latent must be one of {_LATENTS}, got {latent!r}")
    if not isinstance(state_dim, int) or state_dim <= 0:
        raise ValueError(f"state_dim must be a positive int, got {state_dim!r}")
    if latent == "normal":
        if not scale_lb >= 0:
            raise ValueError(f"scale_lb must be >= 0, got {scale_lb!r}")
        return _NormalLatent(state_dim, float(scale_lb))
    if not isinstance(num_classes, int) or num_classes < 2 or state_dim % num_classes:
        raise ValueError(
            "with latent='categorical', num_classes must be an int >= 2 that divides "
            f"state_dim={state_dim}, got {num_classes!r}"
        )
    return _CategoricalLatent(state_dim // num_classes, num_classes)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _draw_noise(module: Any, tensordict: TensorDictBase, key: Any, like: Tensor) -> Tensor:
    """The noise at ``key``, else fresh noise for the batch shape of ``like``."""
    noise = tensordict.get(key, None)
    if noise is None:
        noise = module.latent.sample_noise(like.shape[:-1], dtype=like.dtype, device=like.device)
    return noise


class RSSMPrior(TensorDictModuleBase):
    """Dreamer's prior: the next belief from (state, belief, action), then p(next state).

    ``belief' = GRUCell(ELU(Linear([state, action])), belief)``, then an MLP
    (``Linear, ELU, Linear``) of ``belief'`` gives the latent's parameters, and a sample of
    it is the next state. Default keys (TorchRL's): reads ``"state"``, ``"belief"``,
    ``"action"``; writes ``("next", "prior_mean")``, ``("next", "prior_std")``,
    ``("next", "state")``, ``("next", "belief")``. With ``latent="categorical"`` the two
    parameter keys are replaced by ``("next", "prior_logits")``.

    The sampling noise is read from ``("next", "prior_noise")`` when present (standard
    normal for a Normal latent, Gumbel noise per logit for a categorical one), else drawn
    from torch's global generator.

    Args:
        action_spec: anything with a ``shape`` whose last entry is the action size (a
            TensorSpec); may be ``None`` when ``action_dim`` is given.
        hidden_dim: width of the MLP layers.
        rnn_hidden_dim: size of the belief (the GRU cell's hidden size).
        state_dim: size of the stochastic state.
        scale_lb: the standard deviation's lower bound (Normal latent).
        action_dim: the action size; overrides ``action_spec``.
        latent: ``"normal"`` or ``"categorical"`` (DreamerV2's one-hots).
        num_classes: classes per categorical (``state_dim`` must be a multiple of it).

    Raises:
        ValueError: a size is not a positive int, neither ``action_spec`` nor
            ``action_dim`` gives the action size, or ``latent`` is unknown.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_recurrent._rssm import RSSMPrior
        >>> prior = RSSMPrior(action_dim=2, hidden_dim=8, rnn_hidden_dim=6, state_dim=4)
        >>> td = TensorDict(state=torch.zeros(3, 4), belief=torch.zeros(3, 6),
        ...                 action=torch.randn(3, 2), batch_size=[3])
        >>> td = prior(td)
        >>> td["next", "belief"].shape, td["next", "prior_std"].min() >= 0.1
        (torch.Size([3, 6]), tensor(True))
    """

    def __init__(
        self,
        action_spec: Any = None,
        hidden_dim: int = 200,
        rnn_hidden_dim: int = 200,
        state_dim: int = 30,
        scale_lb: float = 0.1,
        *,
        action_dim: int | None = None,
        latent: str = "normal",
        num_classes: int = 32,
    ) -> None:
        super().__init__()
        if action_dim is None:
            shape = getattr(action_spec, "shape", None)
            if shape is None or len(shape) == 0:
                raise ValueError(
                    "RSSMPrior needs the action size: pass action_dim=int or an action_spec "
                    f"with a non-empty shape, got action_spec={action_spec!r}"
                )
            action_dim = int(shape[-1])
        self.action_dim = _positive("action_dim", action_dim)
        self.hidden_dim = _positive("hidden_dim", hidden_dim)
        self.rnn_hidden_dim = _positive("rnn_hidden_dim", rnn_hidden_dim)
        self.state_dim = _positive("state_dim", state_dim)
        self.latent = make_latent(latent, state_dim, scale_lb, num_classes)
        self.projector = nn.Sequential(nn.Linear(state_dim + action_dim, hidden_dim), nn.ELU())
        self.rnn = nn.GRUCell(hidden_dim, rnn_hidden_dim)
        self.head = nn.Sequential(
            nn.Linear(rnn_hidden_dim, hidden_dim),
            nn.ELU(),
            nn.Linear(hidden_dim, self.latent.raw_dim),
        )
        params = [(NEXT, f"prior_{name}") for name in self.latent.param_names]
        self.in_keys = ["state", "belief", "action"]
        self.out_keys = [*params, (NEXT, "state"), (NEXT, "belief")]
        self.noise_key = (NEXT, "prior_noise")

    def step(
        self, state: Tensor, belief: Tensor, action: Tensor, noise: Tensor
    ) -> tuple[tuple[Tensor, ...], Tensor, Tensor]:
        """One prior step on tensors.

        Args:
            state: ``[*B, state_dim]``.
            belief: ``[*B, rnn_hidden_dim]``.
            action: ``[*B, action_dim]``.
            noise: ``[*B, state_dim]``, from ``self.latent.sample_noise``.

        Returns:
            ``(params, next_state, next_belief)``; ``params`` is ``(mean, std)`` or
            ``(logits,)``.
        """
        x = self.projector(torch.cat([state, action], -1))
        belief = self.rnn(x, belief)
        params, state = self.latent(self.head(belief), noise)
        return params, state, belief

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        state, belief, action = (tensordict.get(k) for k in self.in_keys)
        noise = _draw_noise(self, tensordict, self.noise_key, state)
        params, state, belief = self.step(state, belief, action, noise)
        for key, value in zip(self.out_keys, (*params, state, belief), strict=True):
            tensordict.set(key, value)
        return tensordict


class RSSMPosterior(TensorDictModuleBase):
    """Dreamer's posterior: q(state | belief, observation embedding).

    An MLP (``Linear, ELU, Linear``) of ``[belief, obs_embedding]`` gives the latent's
    parameters and a sample of it is the state. Default keys (TorchRL's): reads
    ``("next", "belief")`` and ``("next", "encoded_latents")``; writes
    ``("next", "posterior_mean")``, ``("next", "posterior_std")`` and
    ``("next", "state")`` (``("next", "posterior_logits")`` replaces the two parameter
    keys with ``latent="categorical"``). Noise: ``("next", "posterior_noise")`` when
    present, else torch's global generator.

    Args:
        hidden_dim: width of the MLP's hidden layer.
        state_dim: size of the stochastic state.
        scale_lb: the standard deviation's lower bound (Normal latent).
        rnn_hidden_dim: size of the belief; with ``obs_embedding_dim``, fixes the first
            layer's input size. When either is ``None`` the first layer is a
            ``LazyLinear`` (TorchRL's behaviour), initialised on the first call.
        obs_embedding_dim: size of the observation embedding.
        latent: ``"normal"`` or ``"categorical"``.
        num_classes: classes per categorical.

    Raises:
        ValueError: a size is not a positive int or ``latent`` is unknown.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_recurrent._rssm import RSSMPosterior
        >>> post = RSSMPosterior(8, 4, rnn_hidden_dim=6, obs_embedding_dim=5)
        >>> td = TensorDict({("next", "belief"): torch.zeros(3, 6),
        ...                  ("next", "encoded_latents"): torch.randn(3, 5)}, [3])
        >>> post(td)["next", "state"].shape
        torch.Size([3, 4])
    """

    def __init__(
        self,
        hidden_dim: int = 200,
        state_dim: int = 30,
        scale_lb: float = 0.1,
        *,
        rnn_hidden_dim: int | None = None,
        obs_embedding_dim: int | None = None,
        latent: str = "normal",
        num_classes: int = 32,
    ) -> None:
        super().__init__()
        self.hidden_dim = _positive("hidden_dim", hidden_dim)
        self.state_dim = _positive("state_dim", state_dim)
        self.rnn_hidden_dim = rnn_hidden_dim
        if rnn_hidden_dim is not None:
            _positive("rnn_hidden_dim", rnn_hidden_dim)
        if obs_embedding_dim is not None:
            _positive("obs_embedding_dim", obs_embedding_dim)
        self.latent = make_latent(latent, state_dim, scale_lb, num_classes)
        if rnn_hidden_dim is None or obs_embedding_dim is None:
            first: nn.Module = nn.LazyLinear(hidden_dim)
        else:
            first = nn.Linear(rnn_hidden_dim + obs_embedding_dim, hidden_dim)
        self.head = nn.Sequential(first, nn.ELU(), nn.Linear(hidden_dim, self.latent.raw_dim))
        params = [(NEXT, f"posterior_{name}") for name in self.latent.param_names]
        self.in_keys = [(NEXT, "belief"), (NEXT, "encoded_latents")]
        self.out_keys = [*params, (NEXT, "state")]
        self.noise_key = (NEXT, "posterior_noise")

    def step(
        self, belief: Tensor, obs_embedding: Tensor, noise: Tensor
    ) -> tuple[tuple[Tensor, ...], Tensor]:
        """One posterior step on tensors: ``(params, state)`` (see :meth:`RSSMPrior.step`)."""
        return self.latent(self.head(torch.cat([belief, obs_embedding], -1)), noise)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        belief, embedding = (tensordict.get(k) for k in self.in_keys)
        noise = _draw_noise(self, tensordict, self.noise_key, belief)
        params, state = self.step(belief, embedding, noise)
        for key, value in zip(self.out_keys, (*params, state), strict=True):
            tensordict.set(key, value)
        return tensordict
