"""``RSSMRollout``: the prior and posterior rolled over the time dimension of a batch.

Three ways to run the same step function (:meth:`RSSMRollout.step`):

- the plain Python loop (default);
- ``use_scan=True``: the loop inside ``torch._higher_order_ops.scan``, so
  ``torch.compile`` traces the step once, whatever the sequence length;
- ``compile_step=True``: ``torch.compile`` of the step (loop mode) or of the whole scan
  (scan mode).

All three consume the same pre-drawn noise, so they give the same numbers.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from rl_profiling import profiled
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torch import Tensor

from rl_recurrent._keys import IS_INIT, NEXT
from rl_recurrent._reset import zero_where
from rl_recurrent._rssm_modules import RSSMPosterior, RSSMPrior
from rl_recurrent.exceptions import BackendUnavailableError

__all__ = ["RSSMRollout", "load_scan"]

Carry = tuple[Tensor, Tensor]
_NON_LEAF_GRAD = "The .grad attribute of a Tensor that is not a leaf Tensor"


def load_scan() -> Callable[..., Any] | None:
    """Return torch's ``scan`` higher-order operator, or ``None`` if this torch lacks it."""
    try:
        from torch._higher_order_ops.scan import scan
    except ImportError:
        return None
    return scan


def _check_pair(prior: Any, posterior: Any) -> None:
    if not isinstance(prior, RSSMPrior):
        raise TypeError(f"rssm_prior must be an RSSMPrior, got {type(prior).__name__}")
    if not isinstance(posterior, RSSMPosterior):
        raise TypeError(f"rssm_posterior must be an RSSMPosterior, got {type(posterior).__name__}")
    if prior.state_dim != posterior.state_dim or prior.latent.kind != posterior.latent.kind:
        raise ValueError(
            "rssm_prior and rssm_posterior must share state_dim and latent; got "
            f"({prior.state_dim}, {prior.latent.kind!r}) and "
            f"({posterior.state_dim}, {posterior.latent.kind!r})"
        )
    if posterior.rnn_hidden_dim not in (None, prior.rnn_hidden_dim):
        raise ValueError(
            f"rssm_posterior.rnn_hidden_dim must equal rssm_prior.rnn_hidden_dim="
            f"{prior.rnn_hidden_dim}, got {posterior.rnn_hidden_dim}"
        )


@contextlib.contextmanager
def _quiet_dynamo() -> Iterator[None]:
    """Silence dynamo's probe of ``.grad`` on non-leaf inputs (harmless, once per trace).

    Tracing scan's inputs reads ``.grad`` of the time-major views of the inputs, which
    are not leaves when the inputs require grad; torch warns about it, although nothing
    is wrong. Only that message is filtered.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NON_LEAF_GRAD, category=UserWarning)
        yield


class RSSMRollout(TensorDictModuleBase):
    """Roll an :class:`RSSMPrior` and an :class:`RSSMPosterior` over ``[*B, T]``.

    Time is the last batch dimension. At each step ``t``, where ``"is_init"`` is True the
    carried state and belief are zeroed first; then the prior makes the next belief
    from ``(state, belief, action[t])`` and the posterior the next state from
    ``(next belief, encoded_latents[t])``; they are carried to ``t + 1``.

    Reads: ``"state"`` and ``"belief"`` (``[*B, T, dim]``; only ``t = 0`` is used, zeros
    when absent), ``"action"``, ``("next", "encoded_latents")``, and optionally
    ``"is_init"`` (``[*B, T]`` or ``[*B, T, 1]``; no resets when absent),
    ``("next", "prior_noise")`` and ``("next", "posterior_noise")``.
    Writes: ``("next", "prior_mean")``, ``("next", "prior_std")``,
    ``("next", "posterior_mean")``, ``("next", "posterior_std")`` (``*_logits`` for a
    categorical latent), ``("next", "state")`` (the posterior sample), ``("next",
    "belief")``, and overwrites ``"state"`` and ``"belief"`` with the values each step
    started from (after resets).

    Noise: the noise of all ``T`` steps is drawn before the loop (standard normal, or
    Gumbel noise for a categorical latent) from ``generator`` (``forward`` keyword,
    default torch's global one) unless the two noise keys are given, so every mode
    consumes the same numbers.

    Args:
        rssm_prior: the prior.
        rssm_posterior: the posterior (same ``state_dim`` and latent).
        use_scan: run the time loop inside ``torch._higher_order_ops.scan``.
        compile_step: ``torch.compile`` the step (loop mode) or the whole scan (scan mode).
        compile_options: keyword arguments for ``torch.compile`` (e.g. ``backend``).

    Raises:
        TypeError: the modules are not an RSSMPrior and an RSSMPosterior.
        ValueError: their sizes or latents disagree.
        BackendUnavailableError: ``use_scan=True`` and this torch has no scan operator.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_recurrent._rssm import RSSMPosterior, RSSMPrior, RSSMRollout
        >>> prior = RSSMPrior(action_dim=2, hidden_dim=8, rnn_hidden_dim=6, state_dim=4)
        >>> post = RSSMPosterior(8, 4, rnn_hidden_dim=6, obs_embedding_dim=5)
        >>> rollout = RSSMRollout(prior, post)
        >>> td = TensorDict({"action": torch.randn(3, 7, 2),
        ...                  ("next", "encoded_latents"): torch.randn(3, 7, 5)}, [3, 7])
        >>> td = rollout(td, generator=torch.Generator().manual_seed(0))
        >>> td["next", "belief"].shape, td["next", "posterior_std"].shape
        (torch.Size([3, 7, 6]), torch.Size([3, 7, 4]))
    """

    def __init__(
        self,
        rssm_prior: RSSMPrior,
        rssm_posterior: RSSMPosterior,
        use_scan: bool = False,
        compile_step: bool = False,
        *,
        compile_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        _check_pair(rssm_prior, rssm_posterior)
        if use_scan and load_scan() is None:
            raise BackendUnavailableError(
                f"use_scan=True needs torch._higher_order_ops.scan, which torch "
                f"{torch.__version__} does not provide; use use_scan=False"
            )
        self.rssm_prior = rssm_prior
        self.rssm_posterior = rssm_posterior
        self.use_scan = bool(use_scan)
        self.compile_step = bool(compile_step)
        self.compile_options = dict(compile_options or {})
        self._compiled: Callable[..., Any] | None = None
        self.in_keys = ["state", "belief", "action", (NEXT, "encoded_latents"), IS_INIT]
        self.out_keys = [
            *rssm_prior.out_keys[:-2],
            *rssm_posterior.out_keys[:-1],
            "state",
            "belief",
            (NEXT, "state"),
            (NEXT, "belief"),
        ]

    def step(self, carry: Carry, x: tuple[Tensor, ...]) -> tuple[Carry, tuple[Tensor, ...]]:
        """One time step on tensors, pure (no side effects), as ``scan`` wants it.

        Args:
            carry: ``(state, belief)`` entering the step.
            x: ``(action, encoded_latents, prior_noise, posterior_noise, is_init)`` at
                this step; ``is_init`` is a bool ``[*B, 1]``.

        Returns:
            ``((next_state, next_belief), (*prior_params, *posterior_params, state,
            belief))`` where ``state``/``belief`` are the carry after the reset.
        """
        state, belief = carry
        action, embedding, prior_noise, posterior_noise, is_init = x
        state = zero_where(state, is_init)
        belief = zero_where(belief, is_init)
        prior_params, _, next_belief = self.rssm_prior.step(state, belief, action, prior_noise)
        post_params, next_state = self.rssm_posterior.step(next_belief, embedding, posterior_noise)
        return (next_state, next_belief), (*prior_params, *post_params, state, belief)

    def _scan_body(self, carry: Carry, x: tuple[Tensor, ...]) -> tuple[Carry, tuple[Tensor, ...]]:
        (state, belief), out = self.step(carry, x)
        # Under autograd, scan's outputs may not share storage with each other or with
        # the intermediates saved for backward (the Normal mean is a view, the belief
        # feeds the posterior, the next state is also the carry): clone every output.
        out = (*out, state, belief)
        return (state.clone(), belief.clone()), tuple(o.clone() for o in out)

    def rollout_tensors(
        self, init: Carry, xs: tuple[Tensor, ...], time_dim: int
    ) -> tuple[Tensor, ...]:
        """The whole rollout on tensors, in this module's mode, uncompiled.

        Args:
            init: ``(state, belief)`` at ``t = 0``, ``[*B, dim]``.
            xs: the step inputs of :meth:`step`, each with a time dimension at ``time_dim``.
            time_dim: index of the time dimension in ``xs``.

        Returns:
            The step outputs stacked along ``time_dim``, then ``next_state`` and
            ``next_belief``, in the order of ``out_keys``.
        """
        if self.use_scan:
            _, out = load_scan()(self._scan_body, init, xs, dim=time_dim)
            return tuple(out)
        return self._loop(init, xs, time_dim, self.step)

    @staticmethod
    def _loop(init: Carry, xs: tuple[Tensor, ...], time_dim: int, step: Callable) -> tuple:
        carry, outs = init, []
        for t in range(xs[0].shape[time_dim]):
            carry, out = step(carry, tuple(x.select(time_dim, t) for x in xs))
            outs.append((*out, *carry))
        return tuple(torch.stack(column, time_dim) for column in zip(*outs, strict=True))

    def _run(self, init: Carry, xs: tuple[Tensor, ...], time_dim: int) -> tuple[Tensor, ...]:
        if not self.compile_step:
            return self.rollout_tensors(init, xs, time_dim)
        if self._compiled is None:
            target = self.rollout_tensors if self.use_scan else self.step
            self._compiled = torch.compile(target, **self.compile_options)
        if self.use_scan:
            # Inductor lowers scan to a while_loop whose body reads the loop index with
            # .item(); without capture_scalar_outputs its fake-tensor tracing raises
            # DataDependentOutputException (torch 2.15). The flag only lets .item()
            # become a symbolic integer while tracing; it changes no numbers.
            with torch._dynamo.config.patch(capture_scalar_outputs=True):
                return self._compiled(init, xs, time_dim)
        return self._loop(init, xs, time_dim, self._compiled)

    def _inputs(
        self, td: TensorDictBase, generator: torch.Generator | None
    ) -> tuple[Carry, tuple[Tensor, ...]]:
        time_dim = td.batch_dims - 1
        action, embedding = td.get("action"), td.get((NEXT, "encoded_latents"))
        ref = embedding
        starts = []
        for key, dim in (
            ("state", self.rssm_prior.state_dim),
            ("belief", self.rssm_prior.rnn_hidden_dim),
        ):
            value = td.get(key, None)
            if value is None:
                value = ref.new_zeros(*td.batch_size[:-1], dim)
            else:
                value = value.select(time_dim, 0).contiguous()  # scan: carry == init layout
            starts.append(value)
        noises = []
        for module in (self.rssm_prior, self.rssm_posterior):
            noise = td.get(module.noise_key, None)
            if noise is None:
                noise = module.latent.sample_noise(
                    td.batch_size, generator=generator, dtype=ref.dtype, device=ref.device
                )
            noises.append(noise)
        is_init = td.get(IS_INIT, None)
        if is_init is None:
            is_init = torch.zeros(*td.batch_size, 1, dtype=torch.bool, device=ref.device)
        elif is_init.ndim == td.batch_dims:
            is_init = is_init.unsqueeze(-1)
        return (starts[0], starts[1]), (action, embedding, *noises, is_init.bool())

    @profiled("RSSMRollout.forward")
    def forward(
        self, tensordict: TensorDictBase, *, generator: torch.Generator | None = None
    ) -> TensorDictBase:
        """Roll over the last batch dimension; see the class docstring for the keys."""
        if tensordict.batch_dims < 1:
            raise ValueError(
                "RSSMRollout needs a tensordict with a time dimension (batch_size [*B, T]), "
                f"got batch_size={tuple(tensordict.batch_size)}"
            )
        init, xs = self._inputs(tensordict, generator)
        time_dim = tensordict.batch_dims - 1
        if any(torch.nn.parameter.is_lazy(p) for p in self.parameters()):
            with torch.no_grad():  # initialise LazyLinear eagerly, outside scan / compile
                self.step(init, tuple(x.select(time_dim, 0) for x in xs))
        with _quiet_dynamo():
            outs = self._run(init, xs, time_dim)
        for key, value in zip(self.out_keys, outs, strict=True):
            tensordict.set(key, value)
        return tensordict
