"""Networks (TorchRL names and meaning): ``MLP``, ``ConvNet``, ``NatureCNN`` and
``DuelingCnnDQNet``. Plain ``nn.Module`` s on tensors; wrap them in a tensordict module
(``ProbabilisticActor``, ``ValueOperator``, ``QValueActor``) to read and write keys.

Every model takes any number of leading batch dims (``[*B, features]`` for ``MLP``,
``[*B, C, H, W]`` for the convolutional ones).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

__all__ = ["MLP", "ConvNet", "DuelingCnnDQNet", "NatureCNN", "SquashDims"]


def _widths(num_cells: int | Sequence[int] | None, depth: int | None, default: int) -> list[int]:
    if num_cells is None:
        num_cells = default
    if isinstance(num_cells, int):
        return [num_cells] * (3 if depth is None else int(depth))
    widths = list(num_cells)
    if depth is not None and depth != len(widths):
        raise ValueError(f"depth: expected len(num_cells)={len(widths)} or None, received {depth}")
    return widths


def _per_layer(value: Any, n: int, name: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}: expected one value per layer ({n}), received {len(value)}")
        return list(value)
    return [value] * n


class MLP(nn.Sequential):
    """Linear layers with an activation (and optional norm and dropout) between them.

    Args:
        in_features: input size; ``None`` for a lazy first layer (sized on first call).
        out_features: output size, or a shape the last dim is reshaped to.
        depth: hidden layers when ``num_cells`` is an int (default 3).
        num_cells: width of every hidden layer (int) or of each (list); default 32.
        activation_class: activation after every hidden layer.
        activation_kwargs: its keyword arguments.
        norm_class: a normalisation layer after each hidden linear (e.g. ``nn.LayerNorm``,
            built with the layer's width), or ``None``.
        norm_kwargs: its keyword arguments.
        dropout: dropout probability after each hidden activation, or ``None``.
        bias_last_layer: whether the output layer has a bias.
        activate_last_layer: whether the output goes through the activation too.
        layer_class: the linear layer class (e.g. a noisy linear).
        device: device of the parameters.

    Examples:
        >>> import torch
        >>> MLP(in_features=4, out_features=2, num_cells=[64, 64])(torch.randn(7, 4)).shape
        torch.Size([7, 2])
        >>> MLP(in_features=4, out_features=(2, 3), depth=1)(torch.randn(5, 4)).shape
        torch.Size([5, 2, 3])
    """

    def __init__(
        self,
        in_features: int | None = None,
        out_features: int | Sequence[int] = 1,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        activation_class: type[nn.Module] = nn.Tanh,
        activation_kwargs: dict | None = None,
        norm_class: type[nn.Module] | None = None,
        norm_kwargs: dict | None = None,
        dropout: float | None = None,
        bias_last_layer: bool = True,
        activate_last_layer: bool = False,
        layer_class: type[nn.Module] = nn.Linear,
        device: Any = None,
    ) -> None:
        widths = _widths(num_cells, depth, 32)
        self.out_shape = (out_features,) if isinstance(out_features, int) else tuple(out_features)
        n_out = int(torch.Size(self.out_shape).numel())
        sizes = [in_features, *widths]
        layers: list[nn.Module] = []
        for n_in, width in zip(sizes[:-1], sizes[1:], strict=True):
            layers.append(self._linear(layer_class, n_in, width, True, device))
            layers.extend(self._hidden_tail(width, activation_class, activation_kwargs,
                                            norm_class, norm_kwargs, dropout, device))
        layers.append(self._linear(layer_class, sizes[-1], n_out, bias_last_layer, device))
        if activate_last_layer:
            layers.append(activation_class(**(activation_kwargs or {})))
        super().__init__(*layers)

    @staticmethod
    def _linear(cls: Any, n_in: int | None, n_out: int, bias: bool, device: Any) -> nn.Module:
        if n_in is None:
            return nn.LazyLinear(n_out, bias=bias, device=device)
        return cls(n_in, n_out, bias=bias, device=device)

    @staticmethod
    def _hidden_tail(width, act, act_kwargs, norm, norm_kwargs, dropout, device) -> list[nn.Module]:
        tail: list[nn.Module] = []
        if norm is not None:
            kwargs = dict(norm_kwargs or {})
            given = kwargs.pop("num_features", width)  # TorchRL's scripts name it
            if given != width:
                raise ValueError(f"norm_kwargs: num_features={given} does not match the "
                                 f"hidden layer's width {width}")
            tail.append(norm(width, device=device, **kwargs))
        tail.append(act(**(act_kwargs or {})))
        if dropout:
            tail.append(nn.Dropout(dropout))
        return tail

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, -1)
        out = super().forward(x)
        if len(self.out_shape) > 1:
            out = out.unflatten(-1, self.out_shape)
        return out


class SquashDims(nn.Module):
    """Flatten the last ``ndims_in`` dims (the aggregator of ``ConvNet``).

    Examples:
        >>> SquashDims()(torch.zeros(2, 5, 3, 3, 4)).shape
        torch.Size([2, 5, 36])
    """

    def __init__(self, ndims_in: int = 3) -> None:
        super().__init__()
        self.ndims_in = ndims_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(-self.ndims_in)


class ConvNet(nn.Module):
    """2-d convolutions with an activation between them, flattened at the end.

    Args:
        in_features: input channels; ``None`` for a lazy first layer.
        depth: layers when ``num_cells`` is an int.
        num_cells: output channels of every layer (int) or each (list); default
            ``[32, 32, 32]``.
        kernel_sizes: one size for all layers or one per layer.
        strides: one stride for all layers or one per layer.
        paddings: one padding for all layers or one per layer.
        activation_class: activation after every convolution.
        activation_kwargs: its keyword arguments.
        norm_class: a normalisation after each convolution (built with the channel count).
        norm_kwargs: its keyword arguments.
        squash_last_layer: end with the aggregator (``False``: no aggregator).
        aggregator_class: TorchRL's last module (default :class:`SquashDims`: flatten
            ``[C, H, W]`` into one dim), built with ``aggregator_kwargs``; e.g.
            ``nn.AdaptiveAvgPool2d`` with ``{"output_size": (1, 1)}``.
        aggregator_kwargs: its keyword arguments.
        squeeze_output: squeeze the output's last two dims when they are 1 (after a
            pooling aggregator), as TorchRL.
        device: device of the parameters.

    Input ``[*B, C, H, W]`` (any leading dims); a ``uint8`` input is scaled to ``[0, 1]``
    first, so pixels can stay ``uint8`` in storage.

    On the CPU the input is reordered channels-last (NHWC) before the first layer (the
    ``uint8`` pixels, before scaling), so the convolutions run in that layout: oneDNN's
    convolutions are faster there (``benchmarks/bench_modules.py`` times the Nature CNN's
    forward and backward both ways). The weights keep torch's default layout (so
    ``nn.init.orthogonal_`` and other in-place inits work on them as usual); values are
    those of the NCHW layout up to float rounding, the output's shape is unchanged.

    Examples:
        >>> net = ConvNet(in_features=3, num_cells=[8, 8], kernel_sizes=3, strides=1)
        >>> net(torch.zeros(4, 5, 3, 10, 10)).shape
        torch.Size([4, 5, 288])
    """

    def __init__(
        self,
        in_features: int | None = None,
        depth: int | None = None,
        num_cells: int | Sequence[int] | None = None,
        kernel_sizes: int | Sequence[int] = 3,
        strides: int | Sequence[int] = 1,
        paddings: int | Sequence[int] = 0,
        activation_class: type[nn.Module] = nn.ELU,
        activation_kwargs: dict | None = None,
        norm_class: type[nn.Module] | None = None,
        norm_kwargs: dict | None = None,
        squash_last_layer: bool = True,
        aggregator_class: Any = None,
        aggregator_kwargs: dict | None = None,
        squeeze_output: bool = False,
        device: Any = None,
    ) -> None:
        super().__init__()
        widths = _widths([32, 32, 32] if num_cells is None else num_cells, depth, 32)
        n = len(widths)
        kernels, steps = (
            _per_layer(kernel_sizes, n, "kernel_sizes"),
            _per_layer(strides, n, "strides"),
        )
        pads = _per_layer(paddings, n, "paddings")
        layers: list[nn.Module] = []
        for i, (c_in, c_out) in enumerate(zip([in_features, *widths[:-1]], widths, strict=True)):
            conv_kwargs = {
                "kernel_size": kernels[i],
                "stride": steps[i],
                "padding": pads[i],
                "device": device,
            }
            layers.append(nn.LazyConv2d(c_out, **conv_kwargs) if c_in is None
                          else nn.Conv2d(c_in, c_out, **conv_kwargs))
            if norm_class is not None:
                layers.append(norm_class(c_out, device=device, **(norm_kwargs or {})))
            layers.append(activation_class(**(activation_kwargs or {})))
        if squash_last_layer:
            aggregator = SquashDims if aggregator_class is None else aggregator_class
            layers.append(aggregator(**(aggregator_kwargs or {})))
        if squeeze_output:
            layers.append(_SqueezeHW())
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        x = x.reshape(-1, *x.shape[-3:])
        if x.device.type == "cpu":  # measured there (oneDNN); GPUs keep the input as given
            x = x.contiguous(memory_format=torch.channels_last)
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)  # .float() keeps the channels-last strides
        out = self.layers(x)
        return out.reshape(*lead, *out.shape[1:])


class _SqueezeHW(nn.Module):
    """The last two dims squeezed where they are 1 (TorchRL's ``Squeeze2dLayer``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(-1).squeeze(-1)


class NatureCNN(nn.Module):
    """The DQN Nature paper's network (Mnih et al., 2015): three convolutions (32 8x8/4,
    64 4x4/2, 64 3x3/1, ReLU), then a ReLU linear layer to ``out_features``.

    Input ``[*B, in_channels, 84, 84]`` (stacked frames), ``uint8`` (scaled to ``[0, 1]``)
    or float already in ``[0, 1]``. Followed by a policy or value head in actor-critic use,
    or give ``num_actions`` for a plain Q-network head.

    Args:
        in_channels: stacked frames (4 in the paper).
        out_features: width of the hidden linear layer (512 in the paper).
        num_actions: when given, a last linear layer to the action values.
        input_size: height and width of the frames.

    Examples:
        >>> net = NatureCNN(in_channels=4)
        >>> net(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 512])
    """

    def __init__(
        self, in_channels: int = 4, out_features: int = 512, num_actions: int | None = None,
        input_size: tuple[int, int] = (84, 84),
    ) -> None:
        super().__init__()
        self.convs = ConvNet(in_channels, num_cells=[32, 64, 64], kernel_sizes=[8, 4, 3],
                             strides=[4, 2, 1], activation_class=nn.ReLU)
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, in_channels, *input_size)).shape[-1]
        head: list[nn.Module] = [nn.Linear(flat, out_features), nn.ReLU()]
        if num_actions is not None:
            head.append(nn.Linear(out_features, num_actions))
        self.head = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.convs(x))


class DuelingCnnDQNet(nn.Module):
    """Dueling Q-network over pixels (Wang et al., 2016): a CNN trunk, then an advantage
    and a value stream, ``Q = V + A - mean(A)``.

    Args:
        out_features: number of actions.
        out_features_value: outputs of the value stream (1).
        cnn_kwargs: ``ConvNet`` arguments (default: the Nature CNN's convolutions).
        mlp_kwargs: ``MLP`` arguments of both streams (default: one hidden layer of 512,
            ReLU).

    Examples:
        >>> net = DuelingCnnDQNet(6, cnn_kwargs={"in_features": 4})
        >>> net(torch.zeros(3, 4, 84, 84)).shape
        torch.Size([3, 6])
    """

    def __init__(
        self, out_features: int, out_features_value: int = 1,
        cnn_kwargs: dict | None = None, mlp_kwargs: dict | None = None,
    ) -> None:
        super().__init__()
        cnn = {"num_cells": [32, 64, 64], "kernel_sizes": [8, 4, 3], "strides": [4, 2, 1],
               "activation_class": nn.ReLU, **(cnn_kwargs or {})}
        mlp = {"num_cells": 512, "depth": 1, "activation_class": nn.ReLU, **(mlp_kwargs or {})}
        self.features = ConvNet(**cnn)
        self.advantage = MLP(out_features=out_features, **mlp)
        self.value = MLP(out_features=out_features_value, **mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(-1, keepdim=True)
