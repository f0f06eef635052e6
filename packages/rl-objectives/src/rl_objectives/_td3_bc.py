"""TD3+BC loss (Fujimoto and Gu, 2021, "A Minimalist Approach to Offline RL",
arXiv:2106.06860)."""

from __future__ import annotations

from typing import Any

from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey

from rl_objectives._one_step import LossAndMetadata, act, reduce
from rl_objectives._td3 import TD3Loss

__all__ = ["TD3BCLoss"]


class TD3BCLoss(TD3Loss):
    """TD3+BC: TD3's critics, and an actor that maximises ``Q`` while staying near the data.

    The critics' loss and target are :class:`TD3Loss`'s (target policy smoothing, clipped
    double Q). The actor's, with ``mu`` the actor, ``a_t`` the dataset action, ``A`` the
    action size and ``alpha`` the trade-off::

        lmbd       = alpha / E[|Q_1(s_t, mu(s_t))|]            (detached)
        bc_loss    = E[(1/A) sum_j (mu(s_t)_j - a_t,j)^2]
        loss_actor = -lmbd E[Q_1(s_t, mu(s_t))] + bc_loss       (critics detached)

    ``lmbd`` normalises the Q term by its own scale, so ``alpha`` means the same on every
    task (the paper's 2.5). The policy delay is the training loop's, as in TD3.

    Args:
        actor_network: a deterministic tensordict module writing ``action`` in the bounds.
        qvalue_network: the critics' template (observation and ``action`` in,
            ``state_action_value`` out).
        action_spec: a ``Bounded`` action spec (or ``bounds``).
        bounds: ``(low, high)`` (or ``action_spec``).
        num_qvalue_nets: number of critics (``>= 1``).
        policy_noise: std of the target action noise.
        noise_clip: clip of the target action noise.
        alpha: the BC trade-off (``>= 0``; TD3+BC's 2.5).
        loss_function: ``"l1"``, ``"l2"`` or ``"smooth_l1"`` for the critics.
        delay_actor: keep a target actor.
        delay_qvalue: keep target critics.
        gamma: discount.
        priority_key: TorchRL's older spelling of ``set_keys(priority=...)``.
        separate_losses: accepted for TorchRL compatibility.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"``.

    Raises:
        TypeError: a network is not a tensordict module.
        ValueError: bounds missing or twice, a hyper-parameter out of range.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> class Q(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(3 + 2, 1)
        ...     def forward(self, obs, act):
        ...         return self.net(torch.cat([obs, act], -1))
        >>> actor = TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2),
        ...     torch.nn.Tanh()), ["observation"], ["action"])
        >>> qvalue = TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])
        >>> td = TensorDict({"observation": torch.randn(8, 3), "action": torch.rand(8, 2),
        ...     "next": {"observation": torch.randn(8, 3), "reward": torch.randn(8, 1),
        ...              "done": torch.zeros(8, 1, dtype=torch.bool),
        ...              "terminated": torch.zeros(8, 1, dtype=torch.bool)}}, [8])
        >>> out = TD3BCLoss(actor, qvalue, bounds=(-1.0, 1.0), alpha=2.5)(td)
        >>> sorted(k for k in out.keys() if k.startswith("loss") or k in ("bc_loss", "lmbd"))
        ['bc_loss', 'lmbd', 'loss_actor', 'loss_qvalue']
    """

    def __init__(
        self,
        actor_network: TensorDictModuleBase,
        qvalue_network: TensorDictModuleBase,
        *,
        action_spec: Any = None,
        bounds: tuple[Any, Any] | None = None,
        num_qvalue_nets: int = 2,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        alpha: float = 2.5,
        loss_function: str = "smooth_l1",
        delay_actor: bool = True,
        delay_qvalue: bool = True,
        gamma: float = 0.99,
        priority_key: NestedKey | None = None,
        separate_losses: bool = False,
        reduction: str | None = None,
    ) -> None:
        super().__init__(
            actor_network, qvalue_network, action_spec=action_spec, bounds=bounds,
            num_qvalue_nets=num_qvalue_nets, policy_noise=policy_noise, noise_clip=noise_clip,
            loss_function=loss_function, delay_actor=delay_actor, delay_qvalue=delay_qvalue,
            gamma=gamma, priority_key=priority_key, separate_losses=separate_losses,
            reduction=reduction)
        if not alpha >= 0:
            raise ValueError(f"alpha must be >= 0, got {alpha!r}")
        self.alpha = float(alpha)

    def qvalue_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The critics' loss alone (TorchRL's ``TD3BCLoss.qvalue_loss``): TD3's
        :meth:`~TD3Loss.value_loss`, the same metadata.

        Args:
            tensordict: as :meth:`forward`'s.

        Returns:
            ``(loss_qvalue, metadata)`` (``td_error``, ``next_state_value``,
            ``pred_value``, ``target_value``, detached).

        Raises:
            MissingKeyError: a needed key is absent.
        """
        return self._value_loss(tensordict)

    def actor_loss(self, tensordict: TensorDictBase) -> LossAndMetadata:
        """The actor's loss alone (TorchRL's ``TD3BCLoss.actor_loss``):
        ``-lmbd Q_1(s, mu(s)) + |mu(s) - a|^2``, ``lmbd = alpha / mean|Q_1|`` (detached).

        Args:
            tensordict: ``[*B]`` with the actor's inputs and the dataset ``action``.

        Returns:
            ``(loss_actor, metadata)``: detached ``state_action_value_actor`` and
            ``bc_loss`` (``[*B]``) and ``lmbd``.

        Raises:
            MissingKeyError: a needed key is absent.
        """
        data_action = self._get(tensordict, self.tensor_keys.action)
        action = self._get(act(self.actor_network, tensordict), self.tensor_keys.action)
        q_actor = self._qvalues(tensordict, action, self.qvalue_network_params.detach(), 1)[0]
        lmbd = self.alpha / q_actor.abs().mean().detach().clamp_min(1e-8)
        bc = (action - data_action).pow(2).flatten(tensordict.batch_dims).mean(-1)
        return reduce(-lmbd * q_actor + bc, self.reduction), {
            "state_action_value_actor": q_actor.detach(), "bc_loss": bc.detach(), "lmbd": lmbd,
        }
